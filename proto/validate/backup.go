package validate

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Backups (proto/sundial/v1/backup.proto). These check a request's shape:
// a destination URL that names a place (file:///absolute/dir or
// s3://bucket/prefix) and well-formed backup ids. Whether the place can be
// read or written, and whether a backup exists there, is the broker's to
// answer (Unavailable, NotFound).

// BackupIDPattern is the form of a backup id (and of the id of its run):
// the UTC time the backup started and six hex digits, e.g.
// 20300101T000000Z-0a1b2c.
const BackupIDPattern = `^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$`

var backupIDRe = regexp.MustCompile(BackupIDPattern)

// validBackupID: of BackupIDPattern, and its time a real one.
func validBackupID(id string) bool {
	if !backupIDRe.MatchString(id) {
		return false
	}
	_, err := time.Parse("20060102T150405Z", id[:len("20060102T150405Z")])
	return err == nil
}

// MaxBackupLocationBytes caps a destination URL.
const MaxBackupLocationBytes = 2048

// S3LocationParams are the query parameters an s3:// destination takes:
// endpoint (host:port of an S3-compatible server; default AWS), region and
// tls (true or false; default true).
var S3LocationParams = []string{"endpoint", "region", "tls"}

// BackupLocation checks a destination URL in field: file:///absolute/dir
// (no host, no query) or s3://bucket/prefix with the query parameters of
// S3LocationParams and no credentials (the brokers read those from their
// environment or their backup credentials file).
func BackupLocation(field, loc string) []apierr.FieldViolation {
	const want = "file:///absolute/dir or s3://bucket/prefix"
	if loc == "" {
		return violation(field, "required: where the backups are, "+want)
	}
	if len(loc) > MaxBackupLocationBytes {
		return violation(field, fmt.Sprintf("at most %d bytes", MaxBackupLocationBytes))
	}
	u, err := url.Parse(loc)
	if err != nil {
		return violation(field, fmt.Sprintf("not a URL (%v): want %s", err, want))
	}
	if u.User != nil {
		return violation(field, "must not hold credentials: the brokers read them from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or their backup credentials file")
	}
	switch u.Scheme {
	case "file":
		return fileLocation(field, u)
	case "s3":
		return s3Location(field, u)
	case "":
		return violation(field, fmt.Sprintf("%q is not a URL: want %s", loc, want))
	}
	return violation(field, fmt.Sprintf("unknown scheme %q: want %s", u.Scheme, want))
}

func fileLocation(field string, u *url.URL) []apierr.FieldViolation {
	const want = "file:///absolute/dir, with three slashes"
	switch {
	case u.Opaque != "":
		return violation(field, fmt.Sprintf("file:%s is a relative path: want %s", u.Opaque, want))
	case u.Host != "" && u.Host != "localhost":
		// file://backups/daily: "backups" parsed as a host.
		return violation(field, fmt.Sprintf("file://%s%s is a relative path (or names a host): want %s", u.Host, u.Path, want))
	case !path.IsAbs(u.Path):
		return violation(field, "a file destination needs an absolute directory: want "+want)
	case u.RawQuery != "" || u.Fragment != "":
		return violation(field, "a file destination takes no query or fragment (escape ? and # in a directory name as %3F and %23)")
	}
	return nil
}

func s3Location(field string, u *url.URL) []apierr.FieldViolation {
	if u.Host == "" {
		return violation(field, "an s3 destination needs a bucket: s3://bucket/prefix")
	}
	if u.Fragment != "" {
		return violation(field, "an s3 destination takes no fragment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return violation(field, fmt.Sprintf("query does not parse: %v", err))
	}
	var out []apierr.FieldViolation
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vs := q[name]
		switch {
		case !slices.Contains(S3LocationParams, name):
			out = append(out, violation(field, fmt.Sprintf("unknown parameter %q: an s3 destination takes %s", name, strings.Join(S3LocationParams, ", ")))...)
		case len(vs) != 1:
			out = append(out, violation(field, fmt.Sprintf("parameter %q given %d times", name, len(vs)))...)
		case name == "endpoint" && !s3Endpoint(vs[0]):
			out = append(out, violation(field, fmt.Sprintf("endpoint %q: want host or host:port of the S3 server (no scheme: tls=false for plain http)", vs[0]))...)
		case name == "tls":
			if _, err := strconv.ParseBool(vs[0]); err != nil {
				out = append(out, violation(field, fmt.Sprintf("tls %q: want true or false", vs[0]))...)
			}
		}
	}
	return out
}

// s3Endpoint: host or host:port, without a scheme.
func s3Endpoint(ep string) bool {
	if ep == "" || strings.ContainsFunc(ep, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune(".-_:[]", r)
	}) {
		return false
	}
	return !strings.Contains(ep, ":") || dialable(ep)
}

// BackupID checks a backup id in field: required, and of the form
// BackupIDPattern.
func BackupID(field, id string) []apierr.FieldViolation {
	if id == "" {
		return violation(field, "required: the backup's id (shardctl backup list shows them)")
	}
	return optionalBackupID(field, id)
}

// optionalBackupID checks id when given ("" names the newest).
func optionalBackupID(field, id string) []apierr.FieldViolation {
	if id != "" && !validBackupID(id) {
		return violation(field, fmt.Sprintf("%q is not a backup id: want the form 20300101T000000Z-0a1b2c", truncate(id, 64)))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// CreateBackup checks that dest is a destination URL.
func CreateBackup(req *sundialv1.CreateBackupRequest) []apierr.FieldViolation {
	return BackupLocation("dest", req.GetDest())
}

// GetBackupRun checks id when given (empty: the newest run).
func GetBackupRun(req *sundialv1.GetBackupRunRequest) []apierr.FieldViolation {
	return optionalBackupID("id", req.GetId())
}

// ListBackups checks that dest is a destination URL.
func ListBackups(req *sundialv1.ListBackupsRequest) []apierr.FieldViolation {
	return BackupLocation("dest", req.GetDest())
}

// VerifyBackup checks dest and backup_id (required).
func VerifyBackup(req *sundialv1.VerifyBackupRequest) []apierr.FieldViolation {
	return append(BackupLocation("dest", req.GetDest()), BackupID("backup_id", req.GetBackupId())...)
}

// DeleteBackup checks dest and backup_id (required).
func DeleteBackup(req *sundialv1.DeleteBackupRequest) []apierr.FieldViolation {
	return append(BackupLocation("dest", req.GetDest()), BackupID("backup_id", req.GetBackupId())...)
}

// RestoreBackup checks src and backup_id when given (empty: the newest
// complete backup in src).
func RestoreBackup(req *sundialv1.RestoreBackupRequest) []apierr.FieldViolation {
	return append(BackupLocation("src", req.GetSrc()), optionalBackupID("backup_id", req.GetBackupId())...)
}

// MinBackupEveryMs is the shortest interval of a backup schedule.
const MinBackupEveryMs = 60_000

// SetBackupSchedule checks a schedule to set: every_ms 0 clears it;
// otherwise dest is a destination URL, every_ms at least a minute,
// full_every_ms 0 (every backup full) or at least every_ms, and keep_ms 0
// (keep every backup) or at least both (the chain kept needs its full
// backup).
func SetBackupSchedule(req *sundialv1.SetBackupScheduleRequest) []apierr.FieldViolation {
	sc := req.GetSchedule()
	every, full, keep := sc.GetEveryMs(), sc.GetFullEveryMs(), sc.GetKeepMs()
	if every == 0 {
		return nil
	}
	out := BackupLocation("schedule.dest", sc.GetDest())
	if every < MinBackupEveryMs {
		out = append(out, violation("schedule.every_ms", fmt.Sprintf("%d: at least %d (a minute); 0 clears the schedule", every, MinBackupEveryMs))...)
	}
	if full != 0 && full < every {
		out = append(out, violation("schedule.full_every_ms", fmt.Sprintf("%d: 0 (every backup full) or at least every_ms, %d", full, every))...)
	}
	if keep != 0 && keep < max(full, every) {
		out = append(out, violation("schedule.keep_ms", fmt.Sprintf("%d: 0 (keep every backup) or at least full_every_ms and every_ms, %d: the chain kept needs its full backup", keep, max(full, every)))...)
	}
	return out
}
