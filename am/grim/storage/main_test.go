package storage

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWithLeakCheck(m) }
