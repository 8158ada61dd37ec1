package grim

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWithLeakCheck(m) }

// ch returns channel i of ep, for tests that know it exists.
func (ep *Endpoint) ch(i int) *Channel {
	c, err := ep.Channel(i)
	if err != nil {
		panic(err)
	}
	return c
}
