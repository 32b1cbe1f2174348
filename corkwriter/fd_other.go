//go:build !unix

package corkwriter

import "io"

type sysScratch struct{}

func (*sysScratch) clearScratch() {}

func newConnSender(w io.Writer) sender { return newPlainSender(w) }
