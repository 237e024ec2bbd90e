package validate

import (
	"slices"
	"strings"
	"testing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestBackupLocation(t *testing.T) {
	for _, tc := range []struct {
		loc  string
		want string // a part of the one violation's description; "" when valid
	}{
		{"file:///var/backups/sundial", ""},
		{"file:///", ""},
		{"file://localhost/var/backups", ""},
		{"s3://backups/p?endpoint=minio.internal", ""},
		{"file:///dir%3Fwith%23marks", ""},
		{"s3://backups", ""},
		{"s3://backups/sundial/prod", ""},
		{"s3://backups/p?endpoint=127.0.0.1:9000&region=us-east-1&tls=false", ""},
		{"", "required"},
		{"/var/backups", "is not a URL"},
		{"backups", "is not a URL"},
		{"file://backups/daily", "relative path"},
		{"file:backups", "relative path"},
		{"file://", "absolute directory"},
		{"file:///b?x=1", "no query"},
		{"file:///b#x", "no query or fragment"},
		{"http://host/backups", `unknown scheme "http"`},
		{"s3:///prefix", "needs a bucket"},
		{"s3://key:secret@backups/p", "must not hold credentials"},
		{"s3://backups/p?endpoint=http://minio:9000", `endpoint "http://minio:9000"`},
		{"s3://backups/p?endpoint=minio:0", `endpoint "minio:0"`},
		{"s3://backups/p?tls=maybe", `tls "maybe"`},
		{"s3://backups/p?access_key=x", `unknown parameter "access_key"`},
		{"s3://backups/p?region=a&region=b", "given 2 times"},
		{"s3://backups/p%zz", "not a URL"},
		{"file:///" + strings.Repeat("a", MaxBackupLocationBytes), "at most 2048 bytes"},
	} {
		t.Run(tc.loc, func(t *testing.T) {
			got := BackupLocation("dest", tc.loc)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("BackupLocation(%q) = %v, want none", tc.loc, got)
			case tc.want != "" && (len(got) != 1 || got[0].Field != "dest" || !strings.Contains(got[0].Description, tc.want)):
				t.Errorf("BackupLocation(%q) = %v, want one on dest saying %q", tc.loc, got, tc.want)
			}
		})
	}
}

func TestBackupRequests(t *testing.T) {
	const (
		dest = "file:///backups"
		id   = "20300101T000000Z-0a1b2c"
	)
	for _, tc := range []struct {
		name   string
		check  func() []string
		fields []string // none when valid
	}{
		{"create", func() []string {
			return fields(CreateBackup(&sundialv1.CreateBackupRequest{Dest: dest, Incremental: true}))
		}, nil},
		{"create without dest", func() []string { return fields(CreateBackup(&sundialv1.CreateBackupRequest{})) }, []string{"dest"}},
		{"create nil", func() []string { return fields(CreateBackup(nil)) }, []string{"dest"}},
		{"newest run", func() []string { return fields(GetBackupRun(&sundialv1.GetBackupRunRequest{})) }, nil},
		{"run by id", func() []string { return fields(GetBackupRun(&sundialv1.GetBackupRunRequest{Id: id})) }, nil},
		{"run by bad id", func() []string { return fields(GetBackupRun(&sundialv1.GetBackupRunRequest{Id: "latest"})) }, []string{"id"}},
		{"run by id of no real time", func() []string {
			return fields(GetBackupRun(&sundialv1.GetBackupRunRequest{Id: "20301399T000000Z-0a1b2c"}))
		}, []string{"id"}},
		{"list", func() []string { return fields(ListBackups(&sundialv1.ListBackupsRequest{Dest: "s3://b/p"})) }, nil},
		{"list without dest", func() []string { return fields(ListBackups(&sundialv1.ListBackupsRequest{})) }, []string{"dest"}},
		{"verify", func() []string { return fields(VerifyBackup(&sundialv1.VerifyBackupRequest{Dest: dest, BackupId: id})) }, nil},
		{"verify without id", func() []string { return fields(VerifyBackup(&sundialv1.VerifyBackupRequest{Dest: dest})) }, []string{"backup_id"}},
		{"verify empty", func() []string { return fields(VerifyBackup(nil)) }, []string{"dest", "backup_id"}},
		{"delete upper-case hex", func() []string {
			return fields(DeleteBackup(&sundialv1.DeleteBackupRequest{Dest: dest, BackupId: "20300101T000000Z-0A1B2C"}))
		}, []string{"backup_id"}},
		{"delete id with a suffix", func() []string {
			return fields(DeleteBackup(&sundialv1.DeleteBackupRequest{Dest: dest, BackupId: id + "/x"}))
		}, []string{"backup_id"}},
		{"delete", func() []string { return fields(DeleteBackup(&sundialv1.DeleteBackupRequest{Dest: dest, BackupId: id})) }, nil},
		{"restore newest", func() []string { return fields(RestoreBackup(&sundialv1.RestoreBackupRequest{Src: dest})) }, nil},
		{"restore one", func() []string {
			return fields(RestoreBackup(&sundialv1.RestoreBackupRequest{Src: dest, BackupId: id}))
		}, nil},
		{"restore without src", func() []string { return fields(RestoreBackup(&sundialv1.RestoreBackupRequest{BackupId: id})) }, []string{"src"}},
		{"restore bad id", func() []string {
			return fields(RestoreBackup(&sundialv1.RestoreBackupRequest{Src: dest, BackupId: "20300101-000000"}))
		}, []string{"backup_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.check(); !slices.Equal(got, tc.fields) {
				t.Errorf("violation fields = %v, want %v", got, tc.fields)
			}
		})
	}
}

func TestSetBackupSchedule(t *testing.T) {
	const minute, hour = 60_000, 3_600_000
	for _, tc := range []struct {
		name   string
		sc     *sundialv1.BackupSchedule
		fields []string
	}{
		{"clear", &sundialv1.BackupSchedule{}, nil},
		{"clear ignores the rest", &sundialv1.BackupSchedule{Dest: "nowhere", KeepMs: 1}, nil},
		{"nil", nil, nil},
		{"hourly", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: hour}, nil},
		{"hourly, full daily, kept a week", &sundialv1.BackupSchedule{Dest: "s3://b/p", EveryMs: hour, FullEveryMs: 24 * hour, KeepMs: 7 * 24 * hour}, nil},
		{"every minute", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: minute, KeepMs: minute}, nil},
		{"no dest", &sundialv1.BackupSchedule{EveryMs: hour}, []string{"schedule.dest"}},
		{"too often", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: minute - 1}, []string{"schedule.every_ms"}},
		{"negative", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: -1}, []string{"schedule.every_ms"}},
		{"full more often than every", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: hour, FullEveryMs: minute}, []string{"schedule.full_every_ms"}},
		{"keep shorter than the chain", &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: hour, FullEveryMs: 24 * hour, KeepMs: 2 * hour}, []string{"schedule.keep_ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fields(SetBackupSchedule(&sundialv1.SetBackupScheduleRequest{Schedule: tc.sc}))
			if !slices.Equal(got, tc.fields) {
				t.Errorf("SetBackupSchedule(%v) fields = %v, want %v", tc.sc, got, tc.fields)
			}
		})
	}
}
