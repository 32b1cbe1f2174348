package corkwriter

const isLinux = true
