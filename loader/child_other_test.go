//go:build !linux

package loader

func childMain(string) int { return 2 }
