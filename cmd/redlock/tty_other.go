//go:build !unix

package main

func inTerminalForeground() bool { return false }
