//go:build tools

// Package tools pins containerd's commands for the real node (tests/testenv/prepare-node.sh builds them).
package tools

import (
	_ "github.com/containerd/containerd/cmd/containerd"
	_ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/cmd/ctr"
)
