//go:build !unix

package scheduler

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
