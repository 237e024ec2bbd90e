package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/devca"
)

// secure is what SUNDIAL_SECURE=1 runs the cluster with, all under
// <data dir>/secure: a development CA (made on the first run, loaded on
// later ones) and under brokers/ an intermediate CA for broker
// certificates only (the Raft transport's trust, tls_raft_ca_file), a
// certificate per broker naming it (URI SAN
// spiffe://sundial/broker/<id>), the proxy's certificate towards the
// brokers and the one it serves clients with, the bootstrap admin token
// and, once the cluster is up, a demo token (publish and consume on
// demo*). Files that exist are kept, so a restart keeps its tokens.
type secure struct {
	dir     string
	ca      *devca.CA
	brokers *devca.CA // the intermediate that signs broker certificates
}

// caValidity is how long the development CA and its certificates last.
const caValidity = 365 * 24 * time.Hour

// Files under secure.dir.
const (
	adminTokenFile = "admin.token"
	demoTokenFile  = "demo.token"
)

func prepareSecure(dataDir string) (*secure, error) {
	dir := filepath.Join(dataDir, "secure")
	ca, err := devca.Load(dir, caValidity)
	if errors.Is(err, os.ErrNotExist) {
		ca, err = devca.New(dir, "sundial-local dev CA", caValidity)
	}
	if err != nil {
		return nil, err
	}
	brokersDir := filepath.Join(dir, "brokers")
	brokers, err := ca.LoadIntermediate(brokersDir)
	if errors.Is(err, os.ErrNotExist) {
		brokers, err = ca.Intermediate(brokersDir, "sundial-local brokers CA")
	}
	if err != nil {
		return nil, err
	}
	s := &secure{dir: dir, ca: ca, brokers: brokers}
	if _, err := os.Stat(s.path(adminTokenFile)); errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 32)
		rand.Read(b) // never fails (crypto/rand)
		if err := os.WriteFile(s.path(adminTokenFile), []byte(base64.RawURLEncoding.EncodeToString(b)+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *secure) path(name string) string { return filepath.Join(s.dir, name) }

// issue returns the files of name, issuing them when missing.
func (s *secure) issue(name string, uris ...string) (tlsfiles.Files, error) {
	return issueOnce(s.ca, s.dir, name, uris...)
}

// issueOnce returns the files of name in dir, having ca issue them when
// missing.
func issueOnce(ca *devca.CA, dir, name string, uris ...string) (tlsfiles.Files, error) {
	f := tlsfiles.Files{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), CAFile: ca.CAFile}
	if _, err := os.Stat(f.CertFile); err == nil {
		if _, err := os.Stat(f.KeyFile); err == nil {
			return f, nil
		}
	}
	return ca.Issue(dir, name, uris...)
}

// brokerArgs are broker id's TLS flags: its certificate comes from the
// brokers' intermediate CA, the only one its Raft transport trusts.
func (s *secure) brokerArgs(id int) ([]string, error) {
	f, err := issueOnce(s.brokers, filepath.Dir(s.brokers.SignerFile), fmt.Sprintf("broker-%d", id), tlsfiles.PrincipalURI(tlsfiles.KindBroker, strconv.Itoa(id)))
	if err != nil {
		return nil, err
	}
	return []string{"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--tls-ca-file", f.CAFile, "--tls-raft-ca-file", s.brokers.SignerFile}, nil
}

// proxyArgs are the proxy's TLS and authentication flags.
func (s *secure) proxyArgs() ([]string, error) {
	cluster, err := s.issue("proxy", tlsfiles.PrincipalURI(tlsfiles.KindProxy, "local"))
	if err != nil {
		return nil, err
	}
	clients, err := s.issue("proxy-clients")
	if err != nil {
		return nil, err
	}
	return []string{"--cluster-cert-file", cluster.CertFile, "--cluster-key-file", cluster.KeyFile, "--cluster-ca-file", cluster.CAFile,
		"--tls-cert-file", clients.CertFile, "--tls-key-file", clients.KeyFile,
		"--auth", "--bootstrap-token-file", s.path(adminTokenFile)}, nil
}

// httpsClient trusts the development CA (the proxy's HTTP port).
func (s *secure) httpsClient() (*http.Client, error) {
	pem, err := os.ReadFile(s.ca.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", s.ca.CAFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}, nil
}

// shardctl runs bin/shardctl against the secure proxy with the admin
// token, answering its standard output.
func (s *secure) shardctl(ctx context.Context, binDir, proxy string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "shardctl"),
		append([]string{"--proxy", proxy, "--cacert", s.ca.CAFile, "--token-file", s.path(adminTokenFile)}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("shardctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// shardctlCommand is how a user runs shardctl against this cluster.
func (s *secure) shardctlCommand() string {
	return fmt.Sprintf("bin/shardctl --cacert %s --token-file %s", s.ca.CAFile, s.path(adminTokenFile))
}

// joinToken makes a single-use join token valid for 10 minutes for the
// broker name, with bin/shardctl and the admin token, and writes its
// secret to <secure>/<name>.join-token for the broker's --join-token-file.
func (s *secure) joinToken(ctx context.Context, binDir, proxy, name string) (string, error) {
	out, err := s.shardctl(ctx, binDir, proxy, "join-token", "create", "--uses", "1", "--expires", "10m", "-o", "json")
	if err != nil {
		return "", fmt.Errorf("a join token for %s: %w", name, err)
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.Secret == "" {
		return "", fmt.Errorf("a join token for %s: shardctl answered %q", name, strings.TrimSpace(out))
	}
	path := s.path(name + ".join-token")
	return path, os.WriteFile(path, []byte(tok.Secret+"\n"), 0o600)
}

// ensureDemo makes the demo role and token on the first secure run (the
// token file is missing), with bin/shardctl and the admin token.
func (s *secure) ensureDemo(ctx context.Context, binDir, proxy string) error {
	if _, err := os.Stat(s.path(demoTokenFile)); err == nil {
		return nil
	}
	if _, err := s.shardctl(ctx, binDir, proxy, "auth", "role", "create", "demo", "--grant", "publish,consume:demo*"); err != nil &&
		!strings.Contains(err.Error(), "already exists") {
		return err
	}
	out, err := s.shardctl(ctx, binDir, proxy, "-o", "json", "auth", "token", "create", "demo", "--role", "demo")
	if err != nil {
		return err
	}
	var created struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		return fmt.Errorf("shardctl auth token create printed %q, want JSON with the secret: %w", out, err)
	}
	if created.Secret == "" {
		return fmt.Errorf("shardctl auth token create printed %q, without a secret", out)
	}
	return os.WriteFile(s.path(demoTokenFile), []byte(created.Secret+"\n"), 0o600)
}

// print tells how to reach the secure cluster.
func (s *secure) print(out io.Writer, l Layout) {
	fmt.Fprintf(out, `
Secure mode (SUNDIAL_SECURE=1): TLS on every hop, mutual TLS between brokers, authentication on.
  CA          %s
  admin token %s   (role admin)
  demo token  %s   (publish and consume on demo*)
  bin/shardctl --proxy %s --cacert %s --token-file %s status
  bin/shardctl --proxy %s --cacert %s --token-file %s publish --topic demo hi
  curl --cacert %s -H "Authorization: Bearer $(cat %s)" -H 'Content-Type: application/json' \
    -X POST https://%s/v1/topics/demo/messages -d '{"messages":[{"text":"hi"}]}'
  grpcurl -cacert %s -H "authorization: Bearer $(cat %s)" %s list
Ctrl-C stops the cluster; a later SUNDIAL_SECURE=1 make run starts it again with the same files.
`, s.ca.CAFile, s.path(adminTokenFile), s.path(demoTokenFile),
		l.ProxyGRPC, s.ca.CAFile, s.path(adminTokenFile),
		l.ProxyGRPC, s.ca.CAFile, s.path(demoTokenFile),
		s.ca.CAFile, s.path(demoTokenFile), l.ProxyHTTP,
		s.ca.CAFile, s.path(adminTokenFile), l.ProxyGRPC)
}
