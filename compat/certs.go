package compat

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/pion/dtls/v3"
)

// MaxDevCertificateValidity is the longest validity a browser accepts for
// a certificate pinned by hash: the W3C WebTransport spec requires
// serverCertificateHashes certificates to be valid for at most two weeks
// (Chromium refuses 15 days with QUIC_TLS_CERTIFICATE_UNKNOWN).
const MaxDevCertificateValidity = 14 * 24 * time.Hour

// DevCertificate is a self-signed certificate for development and tests:
// an ECDSA P-256 key (the only kind serverCertificateHashes accepts) and
// the SHA-256 hash of the DER certificate, which a browser pins with
//
//	new WebTransport(url, {serverCertificateHashes: [{algorithm: 'sha-256', value}]})
//
// and a Go client with ClientTLSConfig. Never use one where a real
// certificate can be had.
type DevCertificate struct {
	Certificate tls.Certificate
	SHA256      [32]byte
}

// NewDevCertificate returns a fresh DevCertificate for hosts (names or IP
// addresses; "localhost" and 127.0.0.1 when none), valid from an hour ago
// for validity, at most MaxDevCertificateValidity.
func NewDevCertificate(validity time.Duration, hosts ...string) (*DevCertificate, error) {
	if validity <= 0 || validity > MaxDevCertificateValidity {
		return nil, fmt.Errorf("compat: certificate validity %v is not within (0, %v]", validity, MaxDevCertificateValidity)
	}
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	// The window counts from NotBefore: an hour of slack for clocks
	// behind, and NotAfter within the validity from then.
	notBefore := time.Now().Add(-time.Hour).Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: hosts[0]},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validity - time.Second),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &DevCertificate{
		Certificate: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		SHA256:      sha256.Sum256(der),
	}, nil
}

// HashBase64 returns the certificate's SHA-256 hash in base64, as
// printed for a browser page to decode into serverCertificateHashes.
func (c *DevCertificate) HashBase64() string { return base64.StdEncoding.EncodeToString(c.SHA256[:]) }

// ServerTLSConfig returns a TLS configuration that serves the certificate.
func (c *DevCertificate) ServerTLSConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Certificate}, MinVersion: tls.VersionTLS13}
}

// ClientTLSConfig returns a TLS configuration that trusts exactly this
// certificate, by its hash, as a browser's serverCertificateHashes does.
func (c *DevCertificate) ClientTLSConfig() *tls.Config {
	return PinnedTLSConfig(c.SHA256)
}

// ServerDTLSConfig returns a DTLS configuration that serves the
// certificate, for ListenSCTPDTLS.
//
//lint:ignore SA1019 public API, kept: see ListenSCTPDTLS.
func (c *DevCertificate) ServerDTLSConfig() *dtls.Config {
	//lint:ignore SA1019 public API, kept: see ListenSCTPDTLS.
	return &dtls.Config{Certificates: []tls.Certificate{c.Certificate}}
}

// ClientDTLSConfig returns a DTLS configuration that trusts exactly this
// certificate, by its hash: ClientTLSConfig's counterpart for
// sctp+dtls:// URLs (ClientOptions.DTLSConfig).
//
//lint:ignore SA1019 public API, kept: see ListenSCTPDTLS.
func (c *DevCertificate) ClientDTLSConfig() *dtls.Config {
	return PinnedDTLSConfig(c.SHA256)
}

// PinnedDTLSConfig is PinnedTLSConfig for DTLS: a client configuration
// that accepts a server certificate whose DER encoding hashes to one of
// hashes, and no other.
//
//lint:ignore SA1019 public API, kept: see ListenSCTPDTLS.
func PinnedDTLSConfig(hashes ...[32]byte) *dtls.Config {
	//lint:ignore SA1019 public API, kept: see ListenSCTPDTLS.
	return &dtls.Config{
		InsecureSkipVerify: true, // replaced by the hash check below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return checkPin(raw, hashes)
		},
	}
}

// checkPin accepts a certificate chain whose leaf, raw[0], hashes to one
// of hashes.
func checkPin(raw [][]byte, hashes [][32]byte) error {
	if len(raw) == 0 {
		return errors.New("compat: server sent no certificate")
	}
	got := sha256.Sum256(raw[0])
	for _, h := range hashes {
		if got == h {
			return nil
		}
	}
	return errors.New("compat: server certificate does not match the pinned hash")
}

// PinnedTLSConfig returns a client TLS configuration that accepts a
// server certificate whose DER encoding hashes to one of hashes, and no
// other: the Go equivalent of serverCertificateHashes.
func PinnedTLSConfig(hashes ...[32]byte) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by the hash check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, cert := range cs.PeerCertificates {
				raw[i] = cert.Raw
			}
			return checkPin(raw, hashes)
		},
	}
}
