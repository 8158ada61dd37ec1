// Package cells is xam's ATM layer: cells, AAL5, SSAM single-cell messages,
// and the framing that carries cells in Ethernet frames.
//
// The model follows the ITU-T recommendations the classic systems ran on:
//
//   - A cell (I.361) is 53 bytes: a 5-byte header naming a virtual circuit
//     (VPI/VCI) and a 48-byte payload. Cell is a byte-slice view with
//     accessors and setters; Fields encodes and decodes a header in the UNI
//     or NNI layout.
//   - The header is protected by the HEC (I.432), a CRC-8 that lets a
//     receiver correct single-bit errors. HECReceiver is the receiver's
//     two-mode (correction/detection) state machine.
//   - AAL5 (I.363.5) turns an SDU of up to 65535 bytes into a CPCS-PDU
//     (SDU, pad, 8-byte trailer with a CRC-32) and cuts it into cells, the
//     last marked end-of-message. Segmenter segments without allocating;
//     Reassembler reassembles per circuit, runs the HEC check, and reports
//     each kind of failure as a distinct error (ErrCRC, ErrLength,
//     ErrOversize, ErrTimeout, ErrLostCells, ...), with bounded memory.
//   - SSAM's single-cell message (von Eicken et al.) is an 8-byte header
//     with a CRC-10 and 40 data bytes inside one cell payload: SSAMCell.
//   - On the wire, whole cells ride in Ethernet II frames (EtherType 0x88B5
//     by default) behind a 4-byte frame header: Framer and Unpack. The
//     layout is specified in docs/wire.md.
//   - gopacket layers decode the frames and cells (LayerTypeFrame,
//     LayerTypeCell), and CaptureWriter writes pcap files in ERF encapsulation
//     that Wireshark dissects as ATM cells and AAL5 PDUs.
//
// Everything that parses input from the wire returns an error wrapping one
// of the package's sentinels and never panics on malformed input; the
// parsers are fuzzed. Types that hold per-link state (HECReceiver,
// Reassembler) belong to one receive path and are not safe for concurrent
// use; Segmenter and Framer are immutable once built.
package cells
