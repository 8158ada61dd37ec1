package cells

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions of this package wrap them with context; test
// with errors.Is.
var (
	ErrShortCell = errors.New("cells: short cell")         // a buffer is not a whole cell
	ErrHEC       = errors.New("cells: HEC error")          // a header error that could not be corrected
	ErrField     = errors.New("cells: field out of range") // a header field does not fit its bits
	ErrSSAM      = errors.New("cells: bad SSAM cell")      // SSAM CRC-10 or length field wrong

	// ErrSDULength: an SDU to segment must hold 1..MaxSDU bytes (a length
	// field of 0 is AAL5's abort indication).
	ErrSDULength = errors.New("cells: SDU length out of range")

	// Reassembly errors, carried by a *ReassemblyError.
	ErrCRC        = errors.New("AAL5 CRC mismatch")
	ErrLength     = errors.New("AAL5 length mismatch")
	ErrOversize   = errors.New("AAL5 PDU oversize")
	ErrTimeout    = errors.New("AAL5 reassembly timeout")
	ErrLostCells  = errors.New("AAL5 lost cells")
	ErrAborted    = errors.New("AAL5 PDU aborted")
	ErrManagement = errors.New("not a user data cell")

	// Frame errors.
	ErrFrameTruncated = errors.New("cells: frame truncated")
	ErrFrameCount     = errors.New("cells: frame cell count mismatch")
	ErrFrameVersion   = errors.New("cells: unsupported frame version")
	ErrFrameType      = errors.New("cells: not an xam frame")
	ErrFrameTooBig    = errors.New("cells: frame exceeds MTU")
)

// ReassemblyError describes a cell or a PDU that reassembly dropped. Err is
// one of ErrCRC, ErrLength, ErrOversize, ErrTimeout, ErrLostCells,
// ErrAborted, ErrManagement or ErrHEC.
type ReassemblyError struct {
	Err    error
	VC     VC
	Cells  int // cells received for the PDU
	Length int // the trailer's length field, or -1 when there was no trailer
	Want   int // cells the length field calls for, or the limit that was exceeded
}

func (e *ReassemblyError) Error() string {
	switch e.Err {
	case ErrLostCells, ErrLength:
		return fmt.Sprintf("cells: VC %v: %v: %d cells received, length %d needs %d",
			e.VC, e.Err, e.Cells, e.Length, e.Want)
	case ErrOversize:
		if e.Length >= 0 {
			return fmt.Sprintf("cells: VC %v: %v: length %d exceeds the limit of %d bytes", e.VC, e.Err, e.Length, e.Want)
		}
		return fmt.Sprintf("cells: VC %v: %v: more than %d cells without an end of message", e.VC, e.Err, e.Want)
	case ErrCRC:
		return fmt.Sprintf("cells: VC %v: %v (%d cells, length %d)", e.VC, e.Err, e.Cells, e.Length)
	case ErrTimeout:
		return fmt.Sprintf("cells: VC %v: %v: %d cells abandoned", e.VC, e.Err, e.Cells)
	case ErrHEC:
		return fmt.Sprintf("%v: cell discarded", e.Err)
	}
	return fmt.Sprintf("cells: VC %v: %v", e.VC, e.Err)
}

func (e *ReassemblyError) Unwrap() error { return e.Err }
