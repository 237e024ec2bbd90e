package broker

import (
	"crypto/tls"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlsmetrics"
)

// transport is the broker's transport security: with TLS files set, its
// gRPC listener serves TLS and accepts only clients presenting a
// certificate of the cluster CA (TLSCAFile), and its calls to other
// brokers present its certificate and verify theirs against that CA. The
// files are reloaded when they change (see tlsfiles). Without them both
// are plaintext, and so is the metrics listener, which serves TLS with
// the same certificate when they are set. (The Raft transport's mutual
// TLS takes the same certificate, through host.Config.RaftTLS, with
// TLSRaftCAFile as its CA when set.)
type transport struct {
	server grpc.ServerOption                // the gRPC listener's credentials
	peer   credentials.TransportCredentials // of calls to other brokers
	// metrics is the metrics listener's TLS: the broker's certificate, no
	// client certificate asked for (Prometheus and health probes verify
	// the broker, the page holds no payloads); nil without TLS files.
	metrics *tls.Config
}

func newTransport(cfg Config, log *zap.Logger, reg prometheus.Registerer) (transport, error) {
	files := cfg.tlsFiles()
	if !files.Enabled() {
		return transport{server: grpc.EmptyServerOption{}, peer: insecure.NewCredentials()}, nil
	}
	var m tlsfiles.Counter
	if reg != nil {
		m = tlsmetrics.New(reg)
	}
	src, err := tlsfiles.New("cluster", files, 0, m, log)
	if err != nil {
		return transport{}, err
	}
	if cfg.TLSRaftCAFile == "" && log != nil {
		log.Warn("tls_raft_ca_file is not set: the Raft transport accepts every certificate of tls_ca_file, a proxy's too (docs/security.md)")
	}
	if cfg.TLSRaftCAFile != "" {
		// Dragonboat reads the file itself later and says only "failed to
		// append certs" of a bad one: load it here to name it.
		if _, err := tlsfiles.New("raft", cfg.raftTLSFiles(), 0, nil, nil); err != nil {
			return transport{}, fmt.Errorf("tls_raft_ca_file: %w", err)
		}
	}
	return transport{
		server:  grpc.Creds(credentials.NewTLS(src.ServerConfig(tls.RequireAndVerifyClientCert, "h2"))),
		peer:    credentials.NewTLS(src.ClientConfig()),
		metrics: src.ServerConfig(tls.NoClientCert, "http/1.1"),
	}, nil
}

// tlsFiles are the TLS settings as files.
func (c Config) tlsFiles() tlsfiles.Files {
	return tlsfiles.Files{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, CAFile: c.TLSCAFile}
}

// raftTLSFiles are the Raft transport's files: tlsFiles with the Raft CA
// when one is set.
func (c Config) raftTLSFiles() tlsfiles.Files {
	f := c.tlsFiles()
	if c.TLSRaftCAFile != "" {
		f.CAFile = c.TLSRaftCAFile
	}
	return f
}
