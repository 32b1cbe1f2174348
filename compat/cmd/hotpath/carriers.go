package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

// carriers are the listeners beside the HTTP one: QUIC with WebTransport
// on a UDP port, SCTP over UDP on another, WebRTC signalling on the HTTP
// mux. Their URLs are printed at start and served at /carriers.json, so a
// page finds the WebTransport URL and the certificate hash to pin.
type carriers struct {
	WebTransport *webTransportInfo `json:"webTransport,omitempty"`
	QUIC         string            `json:"quic,omitempty"`
	SCTP         string            `json:"sctp,omitempty"`
	WebRTC       string            `json:"webRTC,omitempty"`
}

type webTransportInfo struct {
	URL string `json:"url"`
	// CertificateHash is the base64 SHA-256 of the development
	// certificate, for serverCertificateHashes.
	CertificateHash string `json:"certificateHash,omitempty"`
}

// startCarriers starts what the flags ask for; httpAddr is where the HTTP
// listener is, for the signalling URL.
func startCarriers(srv *compat.Server, mux *http.ServeMux, httpAddr, quicAddr, sctpAddr string, webrtc, webrtcLoopback bool, certFile, keyFile string) (*carriers, error) {
	c := &carriers{}
	if quicAddr != "" {
		tlsConf, hash, err := quicTLS(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		ln, err := srv.ListenQUIC(quicAddr, tlsConf)
		if err != nil {
			return nil, fmt.Errorf("-quic %s: %w", quicAddr, err)
		}
		go srv.ServeQUIC(ln)
		c.QUIC = "quic://" + ln.Addr().String()
		c.WebTransport = &webTransportInfo{URL: "https://" + ln.Addr().String() + "/wt", CertificateHash: hash}
	}
	if sctpAddr != "" {
		ln, err := compat.ListenSCTP(sctpAddr)
		if err != nil {
			return nil, fmt.Errorf("-sctp %s: %w", sctpAddr, err)
		}
		go srv.ServeSCTP(ln)
		c.SCTP = "sctp://" + ln.Addr().String()
	}
	if webrtc || webrtcLoopback {
		mux.Handle("POST /rtc", srv.WebRTCHandler(compat.WebRTCOptions{LoopbackOnly: webrtcLoopback}))
		c.WebRTC = "http://" + httpAddr + "/rtc"
	}
	mux.HandleFunc("GET /carriers.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(c)
	})
	return c, nil
}

// quicTLS loads the certificate files, or makes a development certificate
// (13 days, ECDSA P-256) whose hash a browser can pin.
func quicTLS(certFile, keyFile string) (*tls.Config, string, error) {
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("-cert %s -key %s: %w", certFile, keyFile, err)
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}}, "", nil
	}
	dev, err := compat.NewDevCertificate(13*24*time.Hour, "localhost", "127.0.0.1", "::1")
	if err != nil {
		return nil, "", err
	}
	return dev.ServerTLSConfig(), dev.HashBase64(), nil
}

func (c *carriers) print() {
	if c.QUIC != "" {
		fmt.Printf("quic %s\n", c.QUIC)
		if h := c.WebTransport.CertificateHash; h != "" {
			fmt.Printf("webtransport %s sha-256 %s\n", c.WebTransport.URL, h)
		} else { // -cert: a browser trusts it through its CA, no hash to pin
			fmt.Printf("webtransport %s\n", c.WebTransport.URL)
		}
	}
	if c.SCTP != "" {
		fmt.Printf("sctp %s\n", c.SCTP)
	}
	if c.WebRTC != "" {
		fmt.Printf("webrtc %s\n", c.WebRTC)
	}
}
