package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Files names the TLS material of one side of a connection. Empty fields
// are absent: a server needs CertFile and KeyFile, and CAFile to verify
// client certificates; a client needs CAFile to verify servers, and
// CertFile and KeyFile to present a client certificate.
type Files struct {
	CertFile string // PEM certificate chain, leaf first
	KeyFile  string // PEM private key of the leaf
	CAFile   string // PEM CA certificates to verify the peer against
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// Check reports a certificate without its key or a key without its
// certificate; prefix names the settings (e.g. "tls" for tls_cert_file).
func (f Files) Check(prefix string) error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return fmt.Errorf("%s_cert_file and %s_key_file: set both or neither", prefix, prefix)
	}
	return nil
}

// DefaultCheckInterval is how often a Source looks at its files' modification
// times, at most: a handshake within this long of the last check uses the
// material loaded then.
const DefaultCheckInterval = time.Second

// Source serves the current contents of Files to TLS handshakes.
type Source struct {
	name     string // the files' role, the metrics' and logs' label
	files    Files
	interval time.Duration
	metrics  Counter
	log      *zap.Logger
	now      func() time.Time

	mu      sync.Mutex // guards the fields below
	checked time.Time  // last look at the files
	stamp   string     // modification times and sizes of the loaded files
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// ErrNoCertificate is returned by a handshake that needs a certificate
// from a Source whose Files name none.
var ErrNoCertificate = errors.New("tlsfiles: no certificate file configured")

// Counter counts a Source's loads of its files; tlsmetrics implements it
// with Prometheus counters.
type Counter interface {
	// Loaded counts a load of files that succeeded, Failed one that did
	// not (the files loaded before are kept). files is the Source's name.
	Loaded(files string)
	Failed(files string)
}

// New loads files at once (an error names the bad file) and returns a
// Source that reloads them when they change, looking at most every
// interval (DefaultCheckInterval if 0). name labels its logs and counts
// ("cluster", "client"); m may be nil (not counted), log may be nil.
func New(name string, files Files, interval time.Duration, m Counter, log *zap.Logger) (*Source, error) {
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = uncounted{}
	}
	s := &Source{name: name, files: files, interval: interval, metrics: m, log: log, now: time.Now}
	stamp, cert, pool, err := load(files)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %s: %w", name, err)
	}
	s.stamp, s.cert, s.pool, s.checked = stamp, cert, pool, s.now()
	m.Loaded(name)
	return s, nil
}

// current returns the material to use now, reloading it first if the
// files changed since it was loaded and the last check is over an
// interval old.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.checked) < s.interval {
		return s.cert, s.pool
	}
	s.checked = now
	stamp, err := stampOf(s.files)
	if err == nil && stamp == s.stamp {
		return s.cert, s.pool
	}
	var cert *tls.Certificate
	var pool *x509.CertPool
	if err == nil {
		stamp, cert, pool, err = load(s.files)
	}
	if err != nil {
		s.metrics.Failed(s.name)
		s.log.Error("tls files reload failed, keeping the loaded ones", zap.String("files", s.name), zap.Error(err))
		return s.cert, s.pool
	}
	s.stamp, s.cert, s.pool = stamp, cert, pool
	s.metrics.Loaded(s.name)
	s.log.Info("tls files reloaded", zap.String("files", s.name), zap.String("cert_file", s.files.CertFile), zap.String("ca_file", s.files.CAFile))
	return cert, pool
}

// stampOf is the modification times and sizes of the files that are set.
func stampOf(f Files) (string, error) {
	var stamp string
	for _, path := range []string{f.CertFile, f.KeyFile, f.CAFile} {
		if path == "" {
			stamp += "-;"
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return stamp, nil
}

// load reads every file that is set; its stamp is taken first, so a file
// written again while it is read is read again at the next check.
func load(f Files) (string, *tls.Certificate, *x509.CertPool, error) {
	stamp, err := stampOf(f)
	if err != nil {
		return "", nil, nil, err
	}
	var cert *tls.Certificate
	if f.CertFile != "" {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return "", nil, nil, fmt.Errorf("%s, %s: %w", f.CertFile, f.KeyFile, err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return "", nil, nil, err
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return "", nil, nil, fmt.Errorf("%s: no PEM certificate in it", f.CAFile)
		}
	}
	return stamp, cert, pool, nil
}

// uncounted is the Counter of a Source given none.
type uncounted struct{}

func (uncounted) Loaded(string) {}
func (uncounted) Failed(string) {}
