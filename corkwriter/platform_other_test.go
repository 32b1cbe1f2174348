//go:build !linux

package corkwriter

const isLinux = false
