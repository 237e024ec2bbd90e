package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var testEnv = env(map[string]string{"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret})

func TestOpenURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want string // String() of the store
	}{
		{"file", "file:///var/backups/sundial", "file:///var/backups/sundial"},
		{"file trailing slash", "file:///var/backups/sundial/", "file:///var/backups/sundial"},
		{"file localhost", "file://localhost/srv/b", "file:///srv/b"},
		{"file unclean", "file:///srv/./b/../c", "file:///srv/c"},
		{"s3 bucket", "s3://sundial-backups", "s3://sundial-backups"},
		{"s3 prefix", "s3://sundial-backups/prod/eu/", "s3://sundial-backups/prod/eu"},
		{"s3 all parameters", "s3://b-1/p?tls=false&region=eu-west-1&endpoint=127.0.0.1:9000",
			"s3://b-1/p?endpoint=127.0.0.1:9000&region=eu-west-1&tls=false"},
		{"s3 ipv6 endpoint", "s3://bkt?endpoint=[::1]:9000", "s3://bkt?endpoint=[::1]:9000"},
		{"s3 upper-case scheme", "S3://bkt", "s3://bkt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.url, Config{Getenv: testEnv})
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			if got := s.String(); got != tt.want {
				t.Fatalf("Open(%q).String() = %q, want %q", tt.url, got, tt.want)
			}
		})
	}
}

func TestOpenRefusesURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want []string // in the reason
	}{
		{"empty", "", []string{"no scheme"}},
		{"plain path", "/var/backups", []string{"no scheme", "file:///absolute/dir"}},
		{"relative file", "file://relative/dir", []string{"absolute path"}},
		{"opaque file", "file:relative/dir", []string{"absolute path"}},
		{"file two slashes", "file://var/backups", []string{"absolute path", "three slashes"}},
		{"unknown scheme", "gs://bucket/p", []string{`unknown scheme "gs"`}},
		{"file parameter", "file:///srv/b?fsync=no", []string{"unknown parameter fsync", "take none"}},
		{"s3 unknown parameters", "s3://bkt?zone=1&acl=x", []string{"unknown parameter acl, zone", "endpoint, region, tls"}},
		{"s3 password", "s3://AKID:" + testSecret + "@bkt/p", []string{"user or password", "environment", "credentials file"}},
		{"s3 user", "s3://AKID@bkt/p", []string{"user or password", "environment"}},
		{"secret parameter", "s3://bkt/p?secret_access_key=" + testSecret, []string{"secret_access_key", "looks like a credential", "AWS_SECRET_ACCESS_KEY"}},
		{"access key parameter", "s3://bkt/p?accessKey=AKID&endpoint=h:1", []string{"accessKey", "credential"}},
		{"token parameter", "s3://bkt/p?X-Amz-Security-Token=" + testSecret, []string{"X-Amz-Security-Token", "credential"}},
		{"password parameter", "file:///srv/b?password=" + testSecret, []string{"password", "credential"}},
		{"bad escape with password", "s3://u:" + testSecret + "%zz@bkt/p", []string{"invalid URL escape"}},
		{"no bucket", "s3:///prefix", []string{"no bucket"}},
		{"bad bucket", "s3://Bad_Bucket/p", []string{"bad bucket name"}},
		{"bad prefix", "s3://bkt/a//b", []string{"bad prefix"}},
		{"dot prefix", "s3://bkt/a/../b", []string{"bad prefix"}},
		{"bad tls", "s3://bkt?tls=maybe", []string{`tls="maybe"`, "tls=true or tls=false"}},
		{"endpoint with scheme", "s3://bkt?endpoint=http://127.0.0.1:9000", []string{"has a scheme", "tls=false"}},
		{"endpoint with path", "s3://bkt?endpoint=127.0.0.1:9000/x", []string{"not host or host:port"}},
		{"endpoint bad port", "s3://bkt?endpoint=127.0.0.1:99999", []string{"bad port"}},
		{"empty endpoint", "s3://bkt?endpoint=", []string{"endpoint is empty"}},
		{"repeated parameter", "s3://bkt?region=a&region=b", []string{"region is given 2 times"}},
		{"fragment", "s3://bkt/p#x", []string{"fragment"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.url, Config{Getenv: testEnv})
			var ue *URLError
			if !errors.As(err, &ue) {
				t.Fatalf("Open(%q) = %v, %v, want a *URLError", tt.url, s, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(ue.Reason, w) {
					t.Errorf("Open(%q) reason = %q, want it to say %q", tt.url, ue.Reason, w)
				}
			}
			if strings.Contains(err.Error(), testSecret) || strings.Contains(ue.URL, testSecret) {
				t.Errorf("Open(%q) = %v: shows the secret", tt.url, err)
			}
		})
	}
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const otherID = "AKIDSOMEONEELSE"
	wrongEnv := env(map[string]string{"AWS_ACCESS_KEY_ID": otherID, "AWS_SECRET_ACCESS_KEY": "other"})
	tests := []struct {
		name      string
		cfg       Config
		wantToken string
	}{
		{"environment", Config{Getenv: testEnv}, ""},
		{"environment with session token", Config{Getenv: env(map[string]string{
			"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret, "AWS_SESSION_TOKEN": "tok-1",
		})}, "tok-1"},
		{"file over environment", Config{Getenv: wrongEnv, CredentialsFile: writeFile("ini", `
# Sundial's backup key
[other]
aws_access_key_id = `+otherID+`
aws_secret_access_key = nope

[default]
aws_access_key_id = `+testKeyID+`
aws_secret_access_key = `+testSecret+`
region = ignored
`)}, ""},
		{"file without section, with token", Config{Getenv: wrongEnv, CredentialsFile: writeFile("plain",
			"aws_access_key_id="+testKeyID+"\naws_secret_access_key="+testSecret+"\naws_session_token=tok-2\n")}, "tok-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeS3(t, testKeyID, "sundial")
			s, err := Open(f.url("sundial", ""), tt.cfg)
			if err != nil {
				t.Fatalf("Open = %v", err)
			}
			put(ctx, t, s, "x", "signed")
			if got := read(ctx, t, s, "x"); got != "signed" {
				t.Fatalf("Open(x) read %q, want signed", got)
			}
			if tokens := f.sessionTokens(); len(tokens) == 0 || slices.ContainsFunc(tokens, func(tok string) bool { return tok != tt.wantToken }) {
				t.Fatalf("session tokens sent = %q, want only %q", tokens, tt.wantToken)
			}
			if strings.Contains(s.String(), testSecret) {
				t.Fatalf("String() = %q holds the secret", s.String())
			}
		})
	}
}

func TestCredentialsRefused(t *testing.T) {
	dir := t.TempDir()
	noSecret := filepath.Join(dir, "no-secret")
	if err := os.WriteFile(noSecret, []byte("[default]\naws_access_key_id = "+testKeyID+"\n[prod]\naws_secret_access_key = "+testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("[default]\n"+testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"none", Config{Getenv: env(nil)}, "AWS_ACCESS_KEY_ID"},
		{"key id only", Config{Getenv: env(map[string]string{"AWS_ACCESS_KEY_ID": testKeyID})}, "AWS_SECRET_ACCESS_KEY is not"},
		{"secret only", Config{Getenv: env(map[string]string{"AWS_SECRET_ACCESS_KEY": testSecret})}, "AWS_ACCESS_KEY_ID is not"},
		{"file without secret", Config{Getenv: testEnv, CredentialsFile: noSecret}, "[default]"},
		{"garbled file", Config{Getenv: testEnv, CredentialsFile: garbled}, "line 2 is not key = value"},
		{"missing file", Config{Getenv: testEnv, CredentialsFile: filepath.Join(dir, "absent")}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open("s3://bkt?endpoint=127.0.0.1:1&tls=false", tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Fatalf("Open = %v: shows the secret", err)
			}
		})
	}
}

// TestWrongCredentials checks that a server refusing the key answers
// ErrAccessDenied, which is not retried, and no error shows the secret.
func TestWrongCredentials(t *testing.T) {
	f := newFakeS3(t, "AKIDTHESERVERKNOWS", "sundial")
	s, err := Open(f.url("sundial", "p"), Config{Getenv: testEnv})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	retried := 0
	r := Retrying(s, RetryPolicy{Attempts: 3, Initial: time.Millisecond, Max: time.Millisecond}, func(string, string, int, error) { retried++ })
	err = r.Put(context.Background(), "x", strings.NewReader("x"), 1)
	if !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("Put with an unknown key = %v, want ErrAccessDenied", err)
	}
	if retried != 0 {
		t.Fatalf("Put with an unknown key was retried %d times, want 0", retried)
	}
	if _, err := r.List(context.Background(), ""); !errors.Is(err, ErrAccessDenied) || strings.Contains(err.Error(), testSecret) {
		t.Fatalf("List with an unknown key = %v, want ErrAccessDenied without the secret", err)
	}
}
