package cells

import (
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// gopacket layers for xam frames. Importing this package registers
// LayerTypeFrame as the decoder of EtherType 0x88B5, so that
// gopacket.NewPacket(frame, layers.LayerTypeEthernet, ...) yields an
// Ethernet layer, a Frame layer, and one Cell layer per cell. A Cell
// layer's Contents is the whole 53-byte cell and its Payload is the cells
// after it, so the cells of a frame form a chain. Use RegisterEtherType to
// decode another EtherType as xam frames.
//
// The layers suit inspection, tests and tools. The receive path uses Unpack
// and Reassembler directly, which cost no allocations.

// Layer type numbers, outside gopacket's own range.
const (
	layerTypeFrameNum = 8853
	layerTypeCellNum  = 8854
)

// The layer types, registered with gopacket at init.
var (
	LayerTypeFrame gopacket.LayerType = layerTypeFrameNum
	LayerTypeCell  gopacket.LayerType = layerTypeCellNum
)

func init() {
	gopacket.RegisterLayerType(layerTypeFrameNum, gopacket.LayerTypeMetadata{
		Name: "XAMFrame", Decoder: gopacket.DecodeFunc(decodeFrame),
	})
	gopacket.RegisterLayerType(layerTypeCellNum, gopacket.LayerTypeMetadata{
		Name: "ATMCell", Decoder: gopacket.DecodeFunc(decodeCell),
	})
	RegisterEtherType(EtherType)
}

// RegisterEtherType makes gopacket's Ethernet decoder hand frames of type t
// to the xam frame decoder. It is not safe to call concurrently with
// decoding.
func RegisterEtherType(t uint16) {
	layers.EthernetTypeMetadata[t] = layers.EnumMetadata{
		DecodeWith: LayerTypeFrame, Name: "XAM", LayerType: LayerTypeFrame,
	}
}

// FrameLayer is the xam frame header as a gopacket layer.
type FrameLayer struct {
	layers.BaseLayer
	Version uint8
	Flags   uint8
	Count   int // cells announced (and present)
}

func (f *FrameLayer) LayerType() gopacket.LayerType { return LayerTypeFrame }

// CanDecode implements gopacket.DecodingLayer.
func (f *FrameLayer) CanDecode() gopacket.LayerClass { return LayerTypeFrame }

// NextLayerType implements gopacket.DecodingLayer.
func (f *FrameLayer) NextLayerType() gopacket.LayerType { return LayerTypeCell }

// DecodeFromBytes decodes the frame header and checks it as Unpack does.
func (f *FrameLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	cells, hdr, err := UnpackPayload(data)
	if err != nil {
		if df != nil {
			df.SetTruncated()
		}
		return err
	}
	*f = FrameLayer{
		BaseLayer: layers.BaseLayer{Contents: data[:FrameHeaderSize], Payload: cells},
		Version:   hdr.Version(),
		Flags:     hdr.Flags(),
		Count:     hdr.Cells(),
	}
	return nil
}

func decodeFrame(data []byte, p gopacket.PacketBuilder) error {
	f := &FrameLayer{}
	if err := f.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(f)
	return p.NextDecoder(f.NextLayerType())
}

// CellLayer is one ATM cell (UNI header) as a gopacket layer.
type CellLayer struct {
	layers.BaseLayer
	Fields
	HEC      uint8
	HECValid bool   // the HEC matches the header (no correction is attempted)
	Data     []byte // the 48-byte cell payload
}

func (c *CellLayer) LayerType() gopacket.LayerType { return LayerTypeCell }

// CanDecode implements gopacket.DecodingLayer.
func (c *CellLayer) CanDecode() gopacket.LayerClass { return LayerTypeCell }

// NextLayerType is another cell while bytes remain.
func (c *CellLayer) NextLayerType() gopacket.LayerType {
	if len(c.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return LayerTypeCell
}

// DecodeFromBytes decodes one cell from the start of data; the rest of
// data becomes the layer's payload.
func (c *CellLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < CellSize {
		if df != nil {
			df.SetTruncated()
		}
		return fmt.Errorf("%w: %d bytes, want %d", ErrShortCell, len(data), CellSize)
	}
	cell := Cell(data[:CellSize])
	*c = CellLayer{
		BaseLayer: layers.BaseLayer{Contents: data[:CellSize], Payload: data[CellSize:]},
		Fields:    cell.Fields(UNI),
		HEC:       cell.HEC(),
		HECValid:  cell.Valid(),
		Data:      cell.Payload(),
	}
	return nil
}

func decodeCell(data []byte, p gopacket.PacketBuilder) error {
	c := &CellLayer{}
	if err := c.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(c)
	if len(c.Payload) == 0 {
		return nil
	}
	return p.NextDecoder(LayerTypeCell)
}
