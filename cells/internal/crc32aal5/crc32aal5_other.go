//go:build !amd64 || purego

package crc32aal5

// useCLMUL is always false where there is no assembly implementation.
var useCLMUL = false

// useVPCLMUL is always false where there is no assembly implementation.
var useVPCLMUL = false

// update clocks p through the raw CRC register state using the portable
// table implementation, the only one available on this platform.
func update(state uint32, p []byte) uint32 {
	return updateGeneric(state, p)
}

// updateCLMUL is never called on this platform (useCLMUL is false); it
// exists so that the tests compile everywhere.
func updateCLMUL(state uint32, p []byte) uint32 {
	return updateGeneric(state, p)
}
