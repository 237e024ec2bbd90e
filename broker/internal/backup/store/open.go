package store

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Config says where an S3 destination's credentials come from. A file
// destination needs none.
type Config struct {
	// CredentialsFile, when set, names a file holding the S3 credentials,
	// which then take precedence over the environment. Its format is AWS's
	// shared-credentials file: lines "aws_access_key_id = ...",
	// "aws_secret_access_key = ..." and optionally "aws_session_token = ...",
	// read from the [default] section or from lines before any section;
	// other sections and keys are ignored, lines starting with # or ; are
	// comments. Default: none.
	CredentialsFile string
	// Getenv reads the environment: AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, and AWS_REGION when the URL
	// names no region. Default (nil): os.Getenv.
	Getenv func(string) string
}

// credentials are an S3 access key.
type credentials struct {
	accessKeyID, secretAccessKey, sessionToken string
}

// Open opens the destination rawURL names: file:///absolute/dir, or
// s3://bucket/optional/prefix with the optional parameters endpoint
// (host[:port], default s3.amazonaws.com; path-style addressing when
// given), region (default AWS_REGION, else asked of the server) and tls
// (default true). A URL it refuses gives a *URLError; an S3 destination
// without credentials gives ErrNoCredentials. Open does no I/O besides
// reading the credentials file.
func Open(rawURL string, cfg Config) (Store, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "file":
		return openFile(u)
	case "s3":
		return openS3(u, cfg)
	default:
		return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("unknown scheme %q: use file:///absolute/dir or s3://bucket/prefix", u.Scheme)}
	}
}

// credentialWords mark a query parameter that looks like it carries a
// secret.
var credentialWords = []string{"key", "secret", "token", "password", "passwd", "credential", "signature", "auth"}

const credentialsAdvice = "credentials do not belong in the URL: they come from the broker's environment " +
	"(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or its credentials file"

func looksSecret(param string) bool {
	p := strings.ToLower(param)
	return slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(p, w) })
}

// parseURL parses rawURL and refuses what no destination takes: no
// scheme, user info, a fragment, a credential-looking parameter.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, secrets included: keep only its
		// reason, and only the scheme of the URL.
		var ue *url.Error
		reason := "not a URL"
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		shown := ""
		if scheme, _, ok := strings.Cut(rawURL, "://"); ok && !strings.ContainsAny(scheme, "@:/") {
			shown = scheme + "://…"
		}
		return nil, &URLError{URL: shown, Reason: reason}
	}
	if u.Scheme == "" {
		return nil, &URLError{URL: redact(u), Reason: "no scheme: use file:///absolute/dir or s3://bucket/prefix"}
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.User != nil {
		return nil, &URLError{URL: redact(u), Reason: "the URL names a user or password; " + credentialsAdvice}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, &URLError{URL: redact(u), Reason: "bad query: " + err.Error()}
	}
	var secret []string
	for k := range q {
		if looksSecret(k) {
			secret = append(secret, k)
		}
	}
	if len(secret) > 0 {
		slices.Sort(secret)
		return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("parameter %s looks like a credential; %s", strings.Join(secret, ", "), credentialsAdvice)}
	}
	if u.Fragment != "" || strings.HasSuffix(rawURL, "#") {
		return nil, &URLError{URL: redact(u), Reason: "a destination URL has no #fragment"}
	}
	return u, nil
}

// redact renders u without user info and with the value of every
// credential-looking parameter replaced.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for k := range q {
			if looksSecret(k) {
				q[k] = []string{"REDACTED"}
			}
		}
		c.RawQuery = q.Encode()
	} else {
		c.RawQuery = "REDACTED"
	}
	return c.String()
}

// refuseParams refuses any parameter of u not in known.
func refuseParams(u *url.URL, known ...string) error {
	var unknown []string
	for k := range u.Query() {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	reason := fmt.Sprintf("unknown parameter %s", strings.Join(unknown, ", "))
	if len(known) == 0 {
		reason += fmt.Sprintf(": %s URLs take none", u.Scheme)
	} else {
		reason += fmt.Sprintf(": %s URLs take %s", u.Scheme, strings.Join(known, ", "))
	}
	return &URLError{URL: redact(u), Reason: reason}
}

func openFile(u *url.URL) (Store, error) {
	if err := refuseParams(u); err != nil {
		return nil, err
	}
	const advice = "use an absolute path: file:///absolute/dir (three slashes)"
	if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") {
		return nil, &URLError{URL: redact(u), Reason: "the path is not absolute; " + advice}
	}
	if !filepath.IsAbs(u.Path) {
		return nil, &URLError{URL: redact(u), Reason: "the path is not absolute; " + advice}
	}
	return &fileStore{root: filepath.Clean(u.Path)}, nil
}

func openS3(u *url.URL, cfg Config) (Store, error) {
	if err := refuseParams(u, "endpoint", "region", "tls"); err != nil {
		return nil, err
	}
	bucket := u.Host
	if bucket == "" {
		return nil, &URLError{URL: redact(u), Reason: "no bucket: use s3://bucket/optional/prefix"}
	}
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("bad bucket name %q: %v", bucket, err)}
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("bad prefix %q: it needs non-empty segments that do not start with a dot", prefix)}
		}
		prefix += "/"
	}
	q := u.Query()
	dest := s3Dest{bucket: bucket, prefix: prefix, endpoint: q.Get("endpoint"), region: q.Get("region"), tls: true}
	for _, k := range []string{"endpoint", "region", "tls"} {
		if len(q[k]) > 1 {
			return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("parameter %s is given %d times", k, len(q[k]))}
		}
	}
	if v, ok := q["tls"]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return nil, &URLError{URL: redact(u), Reason: fmt.Sprintf("tls=%q: use tls=true or tls=false", v[0])}
		}
		dest.tls, dest.tlsGiven = b, true
	}
	if _, ok := q["endpoint"]; ok {
		if err := checkEndpoint(dest.endpoint); err != nil {
			return nil, &URLError{URL: redact(u), Reason: err.Error()}
		}
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if dest.region == "" {
		dest.region = getenv("AWS_REGION")
	}
	creds, err := loadCredentials(cfg.CredentialsFile, getenv)
	if err != nil {
		return nil, err
	}
	return newS3(dest, q.Get("region") != "", creds)
}

// checkEndpoint checks an endpoint parameter: host or host:port.
func checkEndpoint(ep string) error {
	if ep == "" {
		return errors.New("endpoint is empty: give host or host:port, or leave it out for s3.amazonaws.com")
	}
	if strings.Contains(ep, "://") {
		return fmt.Errorf("endpoint %q has a scheme: give host or host:port, and tls=false for plain http", ep)
	}
	for _, r := range ep {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune(".-_:[]", r) {
			return fmt.Errorf("endpoint %q is not host or host:port", ep)
		}
	}
	if strings.Contains(ep, ":") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" {
			return fmt.Errorf("endpoint %q is not host or host:port", ep)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("endpoint %q has a bad port", ep)
		}
	}
	return nil
}

// loadCredentials reads the credentials from file, when named, else from
// the environment.
func loadCredentials(file string, getenv func(string) string) (credentials, error) {
	if file != "" {
		return readCredentialsFile(file)
	}
	c := credentials{
		accessKeyID:     getenv("AWS_ACCESS_KEY_ID"),
		secretAccessKey: getenv("AWS_SECRET_ACCESS_KEY"),
		sessionToken:    getenv("AWS_SESSION_TOKEN"),
	}
	switch {
	case c.accessKeyID == "" && c.secretAccessKey == "":
		return credentials{}, ErrNoCredentials
	case c.accessKeyID == "":
		return credentials{}, fmt.Errorf("%w (AWS_SECRET_ACCESS_KEY is set, AWS_ACCESS_KEY_ID is not)", ErrNoCredentials)
	case c.secretAccessKey == "":
		return credentials{}, fmt.Errorf("%w (AWS_ACCESS_KEY_ID is set, AWS_SECRET_ACCESS_KEY is not)", ErrNoCredentials)
	}
	return c, nil
}

// readCredentialsFile reads an AWS shared-credentials file (see
// Config.CredentialsFile). Its errors never quote a line: it holds secrets.
func readCredentialsFile(file string) (credentials, error) {
	f, err := os.Open(file)
	if err != nil {
		return credentials{}, fmt.Errorf("store: credentials file: %w", err)
	}
	defer f.Close()
	var c credentials
	section := "default"
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return credentials{}, fmt.Errorf("store: credentials file %s: line %d: a section header is [name]", file, n)
			}
			section = strings.TrimSpace(strings.TrimPrefix(strings.TrimSuffix(line[1:], "]"), "profile "))
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return credentials{}, fmt.Errorf("store: credentials file %s: line %d is not key = value", file, n)
		}
		if section != "default" {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "aws_access_key_id":
			c.accessKeyID = v
		case "aws_secret_access_key":
			c.secretAccessKey = v
		case "aws_session_token":
			c.sessionToken = v
		}
	}
	if err := sc.Err(); err != nil {
		return credentials{}, fmt.Errorf("store: credentials file %s: %w", file, err)
	}
	if c.accessKeyID == "" || c.secretAccessKey == "" {
		return credentials{}, fmt.Errorf("%w: credentials file %s has no aws_access_key_id and aws_secret_access_key in its [default] section", ErrNoCredentials, file)
	}
	return c, nil
}
