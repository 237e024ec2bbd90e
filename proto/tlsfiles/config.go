package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ServerConfig is the tls.Config of a listener serving s's certificate:
// TLS 1.2 or later, the ALPN protocols nextProtos ("h2" for gRPC), and
// client certificates handled as auth says, verified against s's CA
// file. Each handshake takes the files' current contents.
func (s *Source) ServerConfig(auth tls.ClientAuthType, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			if cert == nil {
				return nil, ErrNoCertificate
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   auth,
			}, nil
		},
	}
}

// ErrNoPeerCertificate is a server that presented no certificate.
var ErrNoPeerCertificate = errors.New("tlsfiles: the server presented no certificate")

// ClientConfig is the tls.Config of a client dialling with s: TLS 1.2 or
// later, the server's chain verified against s's CA file (the system roots
// if none) and its name against the name dialled, and s's certificate, if
// any, presented when the server asks for one. Each handshake takes the
// files' current contents.
func (s *Source) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is verified in VerifyConnection instead, against the CA
		// loaded now: RootCAs would fix the CA for the config's lifetime.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool := s.current()
			return verifyServer(cs, pool)
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert, _ := s.current(); cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}

// verifyServer verifies the server's chain against roots (nil: the
// system's) for the name the client asked for.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return ErrNoPeerCertificate
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tlsfiles: server certificate: %w", err)
	}
	return nil
}

// ErrNotSelf is a server that presented another certificate than the one
// a SelfConfig client expects (its own).
var ErrNotSelf = errors.New("tlsfiles: the server presented another certificate than this process's own")

// SelfConfig is the tls.Config of a process dialling its own listener
// served with s (the proxy's admin UI does): it presents s's certificate
// and accepts only a server presenting that same certificate, so no CA
// or name needs to match.
func (s *Source) SelfConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // the leaf is pinned in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			cert, _ := s.current()
			if cert == nil || len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, cert.Certificate[0]) {
				return ErrNotSelf
			}
			return nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert, _ := s.current(); cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil
		},
	}
}
