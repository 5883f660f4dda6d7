//go:build !linux

package testredis

import "os/exec"

func setProcAttr(cmd *exec.Cmd) {}
