//go:build !linux

package chaos

import "syscall"

func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
