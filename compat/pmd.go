package compat

import "github.com/hotpath-go/hotpath/wsframe"

// TEMPORARY until deflatecache lands: no offer is accepted.
type pmdParams struct{}

func negotiatePMD(offers string, c Compression) (*pmdParams, string, error) { return nil, "", nil }

type pmdConn struct{}

func newPMDConn(p pmdParams, c Compression, client bool) *pmdConn { return &pmdConn{} }
func (c *pmdConn) inflate(p []byte, max int64) ([]byte, error)    { return p, nil }
func (c *pmdConn) release()                                       {}
func (c *pmdConn) worthCompressing(n int) bool                    { return false }
func (c *pmdConn) appendCompressedFrame(dst []byte, op wsframe.Opcode, payload []byte, client bool) ([]byte, bool) {
	return dst, false
}
func (c *pmdConn) close()                                            {}
func (c *pmdConn) preparedFrame(p *wsframe.Prepared) ([]byte, error) { return p.Frame(), nil }
