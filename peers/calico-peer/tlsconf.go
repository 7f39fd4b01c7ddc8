package main

// TLS as Calico's Typha and its clients set it up: TLS 1.2 or later; the server requires and
// verifies client certificates against its CA; the client verifies the server's chain against
// its CA itself (no host name check); then each side requires the peer leaf's CN or a URI SAN
// to equal the configured one (either matching admits when both are set).

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

type tlsFiles struct {
	ca, cert, key      string
	peerCN, peerURISAN string
}

func (t tlsFiles) enabled() bool {
	return t.ca+t.cert+t.key+t.peerCN+t.peerURISAN != ""
}

// check enforces Calico's rule: any TLS setting requires the certificate, key, CA and at least
// one of the peer's CN or URI SAN.
func (t tlsFiles) check(cmd, cnFlag, uriFlag string) error {
	if !t.enabled() {
		return nil
	}
	if t.ca == "" || t.cert == "" || t.key == "" || (t.peerCN == "" && t.peerURISAN == "") {
		return usagef("%s: with any TLS setting, --ca, --cert, --key and %s or %s are all required", cmd, cnFlag, uriFlag)
	}
	return nil
}

func (t tlsFiles) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return cert, nil, fmt.Errorf("loading %s and %s: %w", t.cert, t.key, err)
	}
	pem, err := os.ReadFile(t.ca)
	if err != nil {
		return cert, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return cert, nil, fmt.Errorf("%s holds no PEM certificate", t.ca)
	}
	return cert, pool, nil
}

func (t tlsFiles) clientConfig() (*tls.Config, error) {
	cert, pool, err := t.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// The chain is verified below, against the CA, without a host name.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: t.verifier(pool, x509.ExtKeyUsageServerAuth),
	}, nil
}

func (t tlsFiles) serverConfig() (*tls.Config, error) {
	cert, pool, err := t.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{cert},
		MinVersion:            tls.VersionTLS12,
		ClientAuth:            tls.RequireAndVerifyClientCert,
		ClientCAs:             pool,
		VerifyPeerCertificate: t.verifier(pool, x509.ExtKeyUsageClientAuth),
	}, nil
}

func (t tlsFiles) verifier(roots *x509.CertPool, usage x509.ExtKeyUsage) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 {
			if len(raw) == 0 {
				return errors.New("the peer sent no certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, der := range raw {
				c, err := x509.ParseCertificate(der)
				if err != nil {
					return fmt.Errorf("parsing the peer's certificate: %w", err)
				}
				certs[i] = c
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(),
				KeyUsages: []x509.ExtKeyUsage{usage}}
			for _, c := range certs[1:] {
				opts.Intermediates.AddCert(c)
			}
			var err error
			if chains, err = certs[0].Verify(opts); err != nil {
				return err
			}
		}
		leaf := chains[0][0]
		cnOK := t.peerCN != "" && leaf.Subject.CommonName == t.peerCN
		uriOK := false
		for _, u := range leaf.URIs {
			uriOK = uriOK || (t.peerURISAN != "" && u.String() == t.peerURISAN)
		}
		if cnOK || uriOK {
			return nil
		}
		return fmt.Errorf("the peer's certificate has neither the required CN %q nor URI SAN %q (CN %q)",
			t.peerCN, t.peerURISAN, leaf.Subject.CommonName)
	}
}
