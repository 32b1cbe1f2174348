//go:build !linux

package deflatecache

import "time"

// threadCPUTime falls back to wall time where the thread's CPU clock is
// not at hand.
func threadCPUTime() time.Duration { return time.Duration(time.Now().UnixNano()) }
