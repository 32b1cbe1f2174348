package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/quic-go/quic-go"
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

// listeners are the binary's sockets: the HTTP one (the page, WebSocket,
// WebRTC signalling) and, as the flags ask, QUIC's (with WebTransport) and
// SCTP's, each on a UDP port.
type listeners struct {
	http net.Listener
	quic *quic.Listener // nil without -quic
	sctp net.Listener   // nil without -sctp
}

// listen binds every listener before any is served, so that the binary
// starts with all of them or fails with none: bound and served one after
// the other, the TCP port answered before the UDP one was bound, and a
// browser that reconnected over WebTransport then fell back to WebSocket.
// On an error the listeners already bound are closed. tlsConf is QUIC's
// (nil without quicAddr).
func listen(srv *compat.Server, httpAddr, quicAddr, sctpAddr string, tlsConf *tls.Config) (_ *listeners, err error) {
	l := &listeners{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.http, err = net.Listen("tcp", httpAddr); err != nil {
		return nil, fmt.Errorf("-addr %s: %w", httpAddr, err)
	}
	if quicAddr != "" {
		if l.quic, err = srv.ListenQUIC(quicAddr, tlsConf); err != nil {
			return nil, fmt.Errorf("-quic %s: %w", quicAddr, err)
		}
	}
	if sctpAddr != "" {
		if l.sctp, err = compat.ListenSCTP(sctpAddr); err != nil {
			return nil, fmt.Errorf("-sctp %s: %w", sctpAddr, err)
		}
	}
	return l, nil
}

// close closes the listeners that are bound.
func (l *listeners) close() {
	if l.http != nil {
		l.http.Close()
	}
	if l.quic != nil {
		l.quic.Close()
	}
	if l.sctp != nil {
		l.sctp.Close()
	}
}

// serveCarriers serves the UDP listeners; the caller serves the HTTP one.
// A listener that stops for any reason but srv's Shutdown sends its error
// on failed, which has room for both: left unread, QUIC or SCTP stopped
// without a word while the process went on serving HTTP, advertising them
// at /carriers.json.
func (l *listeners) serveCarriers(srv *compat.Server, failed chan<- error) {
	if l.quic != nil {
		go func() {
			if err := srv.ServeQUIC(l.quic); !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("-quic %s: %w", l.quic.Addr(), err)
			}
		}()
	}
	if l.sctp != nil {
		go func() {
			if err := srv.ServeSCTP(l.sctp); !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("-sctp %s: %w", l.sctp.Addr(), err)
			}
		}()
	}
}

// mountCarriers mounts WebRTC signalling, if the flags ask for it, and
// /carriers.json on mux, and returns what they describe. hash is the
// development certificate's for WebTransport ("" with -cert).
func mountCarriers(srv *compat.Server, mux *http.ServeMux, l *listeners, hash string, webrtc, webrtcLoopback bool) *carriers {
	rtc := webrtc || webrtcLoopback
	if rtc {
		mux.Handle("POST /rtc", srv.WebRTCHandler(compat.WebRTCOptions{LoopbackOnly: webrtcLoopback}))
	}
	mux.HandleFunc("GET /carriers.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(describeCarriers(l, hash, rtc, r.Host))
	})
	return describeCarriers(l, hash, rtc, "")
}

// describeCarriers gives the URLs of l's carriers. A listener bound to an
// unspecified address (-quic :4433, 0.0.0.0, [::]) is given with the
// host of reqHost, the Host a request came with, when there is one: as
// bound, /carriers.json told a page on another machine to open
// WebTransport at https://[::]:4433/wt, which is no address of the server.
func describeCarriers(l *listeners, hash string, webrtc bool, reqHost string) *carriers {
	c := &carriers{}
	if l.quic != nil {
		addr := reachableAddr(l.quic.Addr(), reqHost)
		c.QUIC = "quic://" + addr
		c.WebTransport = &webTransportInfo{URL: "https://" + addr + "/wt", CertificateHash: hash}
	}
	if l.sctp != nil {
		c.SCTP = "sctp://" + reachableAddr(l.sctp.Addr(), reqHost)
	}
	if webrtc {
		c.WebRTC = "http://" + reachableAddr(l.http.Addr(), reqHost) + "/rtc"
	}
	return c
}

// reachableAddr is bound as host:port, with reqHost's host in place of an
// unspecified IP.
func reachableAddr(bound net.Addr, reqHost string) string {
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil || reqHost == "" {
		return bound.String()
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return bound.String()
	}
	if h, _, err := net.SplitHostPort(reqHost); err == nil {
		reqHost = h
	}
	return net.JoinHostPort(strings.Trim(reqHost, "[]"), port)
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
