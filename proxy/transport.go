package proxy

import (
	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlsmetrics"
)

// transport is the proxy's transport security. With client-facing TLS
// files its gRPC and HTTP listeners serve TLS 1.2 or later, requiring a
// client certificate of TLSClientCAFile when that is set; with cluster
// files its calls to brokers present the proxy's cluster certificate and
// verify the brokers' against the cluster CA. Files reload when they
// change (see tlsfiles). Without them each side is plaintext.
type transport struct {
	server grpc.ServerOption                // the gRPC listener's credentials
	http   *tls.Config                      // the HTTP listener's; nil: plaintext
	self   credentials.TransportCredentials // the admin UI's calls to the gRPC listener
	broker credentials.TransportCredentials // calls to brokers
}

func newTransport(cfg Config, log *zap.Logger, reg prometheus.Registerer) (transport, error) {
	t := transport{server: grpc.EmptyServerOption{}, self: insecure.NewCredentials(), broker: insecure.NewCredentials()}
	client, cluster := cfg.clientTLSFiles(), cfg.clusterTLSFiles()
	if !client.Enabled() && !cluster.Enabled() {
		return t, nil
	}
	m := tlsmetrics.New(reg)
	if client.Enabled() {
		src, err := tlsfiles.New("client", client, 0, m, log)
		if err != nil {
			return t, err
		}
		auth := tls.NoClientCert
		if client.CAFile != "" {
			auth = tls.RequireAndVerifyClientCert
		}
		t.server = grpc.Creds(credentials.NewTLS(src.ServerConfig(auth, "h2")))
		t.http = src.ServerConfig(auth, "h2", "http/1.1")
		t.self = credentials.NewTLS(src.SelfConfig())
	}
	if cluster.Enabled() {
		src, err := tlsfiles.New("cluster", cluster, 0, m, log)
		if err != nil {
			return t, err
		}
		t.broker = credentials.NewTLS(src.ClientConfig())
	}
	return t, nil
}

// clientTLSFiles are the client-facing TLS settings as files.
func (c Config) clientTLSFiles() tlsfiles.Files {
	return tlsfiles.Files{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, CAFile: c.TLSClientCAFile}
}

// clusterTLSFiles are the TLS settings of calls to brokers as files.
func (c Config) clusterTLSFiles() tlsfiles.Files {
	return tlsfiles.Files{CertFile: c.ClusterCertFile, KeyFile: c.ClusterKeyFile, CAFile: c.ClusterCAFile}
}
