-- Wireshark dissector for xam's frames (docs/wire.md): ATM cells carried
-- in Ethernet frames of EtherType 0x88B5, with AAL5 reassembled across
-- frames, and on top SSAM's Active Messages, the firmware transport
-- (DATA/ACK/NACK/RESET with channel, sequence, stamp and epochs) and the
-- AM-II engine's message header.
--
-- An SSAM message's handler field is two halves (docs/wire.md, "SSAM Active
-- Messages"): the top 16 bits are the high bits of the requester session's
-- 23-bit tag (xam.ssam.tag_hi), the low 16 bits the handler index
-- (xam.ssam.index); a request's ack field holds the tag's low 7 bits, so a
-- request shows its whole tag (xam.ssam.tag). A sync's handler field is the
-- session number (xam.ssam.session), shown with the tag derived from it, so
-- that `xam.ssam.tag_hi == T` finds a session's sync, requests and answers.
-- An answer the receiver refuses as not of its session (an ack field other
-- than seq+1, an ack of an index other than 0 and 0xFFFF or with data) is
-- flagged (xam.ssam.refused), as is a sync it drops (session 0, an ack
-- field other than 0 and 1: xam.ssam.bad_sync); an ack of index 0xFFFF
-- answers a request that named no handler (xam.ssam.rejected).
--
-- Use:  wireshark -X lua_script:tools/wireshark/xam.lua xam.pcapng
--       tshark -X lua_script:tools/wireshark/xam.lua -r xam.pcapng -V
-- or copy this file into Wireshark's personal plugins folder. Captures come
-- from `xam capture --format ether`. Preferences: the EtherType, the
-- VPI/VCI of the mapper's circuit and the VCI of raw frames.
--
-- Which layer a reassembled PDU is: a single cell whose AAL5 trailer and
-- CRC-32 check out is a one-cell PDU; a single cell whose first byte is 5
-- or 6 and whose CRC-10 over bytes 0-45 checks out, or 7 and whose CRC-10
-- over bytes 0-45 and its length's six bits checks out, is a compact
-- transport cell (an AM-II short message, or acknowledgements, or both); any other single
-- cell on a circuit is an SSAM
-- single-cell message (its CRC-10 is checked); cells on the raw circuit
-- (VPI 0, the "Raw VCI" preference, 40) are raw frames of no protocol
-- (pings: a sequence number); a PDU on the mapper's circuit is a mapper
-- message; a PDU whose header lengths add up
-- as the transport's is a transport message; otherwise a PDU whose SDU
-- starts with SSAM's 8-byte header is an SSAM bulk message.

local xam = Proto("xam", "xam: ATM cells over Ethernet")

local kinds = { [0] = "request", [1] = "reply", [2] = "ack", [3] = "sync" }
local trtypes = { [1] = "DATA", [2] = "ACK", [3] = "NACK", [4] = "RESET", [5] = "DATA (compact)", [6] = "ACK (compact)", [7] = "DATA (compact, with an ACK)", [8] = "DATA (compact, continued)" }
local queues = { [0] = "request", [1] = "reply" }
local syncs = { [0] = "ask", [1] = "answer" }
local reject_index = 0xffff -- an ack's index when the request named no handler
local classes = { [1] = "short", [2] = "medium", [3] = "bulk" }
local reasons = {
	[0] = "none", [1] = "bad tag", [2] = "no such endpoint", [3] = "host unreachable",
	[4] = "unknown host", [5] = "too large for the transport", [6] = "endpoint closed",
	[7] = "outside the receiver's store region", [8] = "bulk transfer interrupted",
	[9] = "destination host restarted", [10] = "no such handler",
}

local f = xam.fields
f.version = ProtoField.uint8("xam.version", "Version")
f.flags = ProtoField.uint8("xam.flags", "Flags", base.HEX)
f.start = ProtoField.bool("xam.flags.start", "First cell begins a PDU", 8, nil, 0x01)
f.ncells = ProtoField.uint16("xam.cells", "Cells")
f.cell = ProtoField.uint16("xam.cell", "Cell")
f.gfc = ProtoField.uint8("xam.cell.gfc", "GFC")
f.vpi = ProtoField.uint16("xam.cell.vpi", "VPI")
f.vci = ProtoField.uint16("xam.cell.vci", "VCI")
f.raw_seq = ProtoField.uint64("xam.raw.seq", "Sequence")
f.pti = ProtoField.uint8("xam.cell.pti", "PTI")
f.eom = ProtoField.bool("xam.cell.eom", "End of message")
f.clp = ProtoField.uint8("xam.cell.clp", "CLP")
f.hec = ProtoField.uint8("xam.cell.hec", "HEC", base.HEX)
f.hec_ok = ProtoField.bool("xam.cell.hec_ok", "HEC correct")
f.payload = ProtoField.bytes("xam.cell.payload", "Payload")

f.ssam_kind = ProtoField.uint8("xam.ssam.kind", "Kind", base.DEC, kinds)
f.ssam_seq = ProtoField.uint8("xam.ssam.seq", "Sequence")
f.ssam_ack = ProtoField.uint8("xam.ssam.ack", "Acknowledgement")
f.ssam_sync = ProtoField.uint8("xam.ssam.sync", "Sync", base.DEC, syncs)
f.ssam_handler = ProtoField.uint32("xam.ssam.handler", "Handler field", base.HEX)
f.ssam_tag_hi = ProtoField.uint16("xam.ssam.tag_hi", "Session tag, high 16 bits", base.HEX)
f.ssam_tag_lo = ProtoField.uint8("xam.ssam.tag_lo", "Session tag, low 7 bits", base.HEX)
f.ssam_tag = ProtoField.uint32("xam.ssam.tag", "Session tag", base.HEX)
f.ssam_index = ProtoField.uint16("xam.ssam.index", "Handler index")
f.ssam_rejected = ProtoField.bool("xam.ssam.rejected", "Rejected: the request named no handler")
f.ssam_session = ProtoField.uint32("xam.ssam.session", "Session number")
f.ssam_len = ProtoField.uint8("xam.ssam.len", "Data length")
f.ssam_crc = ProtoField.uint16("xam.ssam.crc10", "CRC-10", base.HEX)
f.ssam_crc_ok = ProtoField.bool("xam.ssam.crc10_ok", "CRC-10 correct")
f.ssam_data = ProtoField.bytes("xam.ssam.data", "Data")

f.pdu_cells = ProtoField.uint16("xam.aal5.cells", "Cells")
f.aal5_uu = ProtoField.uint8("xam.aal5.uu", "CPCS-UU")
f.aal5_cpi = ProtoField.uint8("xam.aal5.cpi", "CPI")
f.aal5_len = ProtoField.uint16("xam.aal5.length", "Length")
f.aal5_crc = ProtoField.uint32("xam.aal5.crc", "CRC-32", base.HEX)
f.aal5_crc_ok = ProtoField.bool("xam.aal5.crc_ok", "CRC-32 correct")
f.sdu = ProtoField.bytes("xam.aal5.sdu", "SDU")

f.tr_type = ProtoField.uint8("xam.tr.type", "Type", base.DEC, trtypes)
f.tr_channel = ProtoField.uint8("xam.tr.channel", "Channel")
f.tr_seq = ProtoField.uint16("xam.tr.seq", "Sequence")
f.tr_stamp = ProtoField.uint32("xam.tr.stamp", "Stamp")
f.tr_len = ProtoField.uint16("xam.tr.length", "Payload length")
f.tr_k = ProtoField.uint16("xam.tr.acks", "Acknowledgement entries")
f.tr_src_epoch = ProtoField.uint32("xam.tr.src_epoch", "Source epoch", base.HEX)
f.tr_dst_epoch = ProtoField.uint32("xam.tr.dst_epoch", "Destination epoch", base.HEX)
f.tr_stamp16 = ProtoField.uint16("xam.tr.stamp16", "Stamp (low 16 bits)")
f.tr_clen = ProtoField.uint8("xam.tr.compact_length", "Payload length")
f.tr_li = ProtoField.uint16("xam.tr.compact_li", "Payload length", base.DEC, nil, 0xfc00)
f.tr_crc = ProtoField.uint16("xam.tr.crc10", "CRC-10", base.HEX)
f.tr_crc_ok = ProtoField.bool("xam.tr.crc10_ok", "CRC-10 correct")
f.tr_ack_channel = ProtoField.uint8("xam.tr.ack.channel", "Acknowledged channel")
f.tr_ack_seq = ProtoField.uint16("xam.tr.ack.seq", "Acknowledged sequence")

f.am_queue = ProtoField.uint8("xam.am.queue", "Queue", base.DEC, queues)
f.am_class = ProtoField.uint8("xam.am.class", "Class", base.DEC, classes)
f.am_nargs = ProtoField.uint8("xam.am.nargs", "Arguments")
f.am_reason = ProtoField.uint8("xam.am.reason", "Return reason", base.DEC, reasons)
f.am_dst = ProtoField.uint16("xam.am.dst", "Destination endpoint")
f.am_src = ProtoField.uint16("xam.am.src", "Source endpoint")
f.am_handler = ProtoField.uint32("xam.am.handler", "Handler")
f.am_index = ProtoField.uint32("xam.am.index", "Destination index")
f.am_tag = ProtoField.uint64("xam.am.tag", "Tag", base.HEX)
f.am_arg = ProtoField.uint64("xam.am.arg", "Argument")
f.am_offset = ProtoField.uint32("xam.am.offset", "Offset")
f.am_length = ProtoField.uint32("xam.am.length", "Length")
f.am_remote = ProtoField.uint32("xam.am.remote", "Remote offset")
f.am_id = ProtoField.uint32("xam.am.bulk_id", "Bulk message number")
f.am_chunk = ProtoField.uint32("xam.am.chunk", "Chunk offset")
f.am_c = ProtoField.uint32("xam.am.data_length", "Data length")
f.am_data = ProtoField.bytes("xam.am.data", "Data")
f.mapper = ProtoField.bytes("xam.mapper", "Mapper message")

local ef_hec = ProtoExpert.new("xam.hec_bad", "HEC incorrect", expert.group.CHECKSUM, expert.severity.WARN)
local ef_crc = ProtoExpert.new("xam.crc_bad", "CRC incorrect", expert.group.CHECKSUM, expert.severity.WARN)
local ef_count = ProtoExpert.new("xam.count_bad", "cell count does not match the frame", expert.group.MALFORMED, expert.severity.ERROR)
local ef_cont = ProtoExpert.new("xam.continued", "ends a PDU begun before the capture", expert.group.SEQUENCE, expert.severity.NOTE)
local ef_refused = ProtoExpert.new("xam.ssam.refused", "not of the session: the receiver refuses it (Stats.Forged)", expert.group.PROTOCOL, expert.severity.WARN)
local ef_badsync = ProtoExpert.new("xam.ssam.bad_sync", "a sync of session 0 or of an ack field other than 0 and 1: the receiver drops it", expert.group.PROTOCOL, expert.severity.WARN)
xam.experts = { ef_hec, ef_crc, ef_count, ef_cont, ef_refused, ef_badsync }

xam.prefs.ethertype = Pref.uint("EtherType", 0x88B5, "the EtherType of xam's frames")
xam.prefs.udp_port = Pref.uint("UDP port", 18553, "the UDP port of xam's UDP form (xam ping --encap udp:PORT)")
xam.prefs.mapper_vpi = Pref.uint("Mapper VPI", 0, "the VPI of the mapper's circuit")
xam.prefs.mapper_vci = Pref.uint("Mapper VCI", 16, "the VCI of the mapper's circuit")
xam.prefs.raw_vci = Pref.uint("Raw VCI", 40, "the VCI of raw frames on VPI 0 (xam ping --api raw and packet, the frame-rate benchmarks): cells of no protocol")

local band, bxor, lshift, rshift = bit32.band, bit32.bxor, bit32.lshift, bit32.rshift

-- CRC-8 of I.432 (x^8+x^2+x+1), on header bytes 0..3, XOR 0x55.
local function hec(b)
	local crc = 0
	for i = 0, 3 do
		crc = bxor(crc, b:get_index(i))
		for _ = 1, 8 do
			if band(crc, 0x80) ~= 0 then
				crc = band(bxor(lshift(crc, 1), 0x07), 0xff)
			else
				crc = band(lshift(crc, 1), 0xff)
			end
		end
	end
	return bxor(crc, 0x55)
end

-- CRC-10 of AAL3/4 (x^10+x^9+x^5+x^4+x+1) on the first n bytes of p;
-- with ssam, on an SSAM cell's 48 payload bytes with the CRC's own 10 bits
-- (in bytes 6 and 7) taken as zero.
local function crc10(p, n, ssam, li)
	local crc = 0
	for i = 0, n - 1 do
		local byte = p:get_index(i)
		if ssam and i == 6 then byte = band(byte, 0xfc) end
		if ssam and i == 7 then byte = 0 end
		if li and i == 46 then byte = band(byte, 0xfc) end -- the length's six bits, not the CRC's
		for bitn = 7, 0, -1 do
			local inbit = band(rshift(byte, bitn), 1)
			local top = band(rshift(crc, 9), 1)
			crc = band(lshift(crc, 1), 0x3ff)
			if bxor(inbit, top) == 1 then crc = bxor(crc, 0x233) end
		end
	end
	return crc
end

-- CRC-32/BZIP2 (0x04C11DB7, MSB first, init and final XOR all ones).
local crctab = {}
for i = 0, 255 do
	local c = lshift(i, 24)
	for _ = 1, 8 do
		if band(c, 0x80000000) ~= 0 then
			c = bxor(lshift(c, 1), 0x04C11DB7)
		else
			c = lshift(c, 1)
		end
	end
	crctab[i] = band(c, 0xffffffff)
end
local function crc32(b, n)
	local crc = 0xffffffff
	for i = 0, n - 1 do
		local idx = band(bxor(rshift(crc, 24), b:get_index(i)), 0xff)
		crc = band(bxor(lshift(crc, 8), crctab[idx]), 0xffffffff)
	end
	return band(bxor(crc, 0xffffffff), 0xffffffff)
end

-- Reassembly across frames, done once per frame (the first pass) and kept
-- by frame number: partial[vc] holds the payloads of an open PDU; done[n]
-- the PDUs frame n completes, each {vc, bytes, cells}.
local partial, done, seen = {}, {}, {}

function xam.init()
	partial, done, seen = {}, {}, {}
end

local function u16(b, o) return b:get_index(o) * 256 + b:get_index(o + 1) end
local function u32(b, o) return u16(b, o) * 65536 + u16(b, o + 2) end

-- aal5ok reports whether a CPCS-PDU (ByteArray) has a consistent trailer and
-- a correct CRC-32, and its SDU length.
local function aal5ok(pdu)
	local n = pdu:len()
	if n < 48 or n % 48 ~= 0 then return false, 0 end
	local len = u16(pdu, n - 6)
	if len == 0 or math.ceil((len + 8) / 48) * 48 ~= n then return false, len end
	return crc32(pdu, n - 4) == u32(pdu, n - 4), len
end

-- session_tag returns the 23-bit tag of SSAM session number session: the
-- top 23 bits of session * 0x9E3779B1 modulo 2^32, or 1 where those are
-- all zero. The product is taken in 16-bit halves, exact in a double.
local function session_tag(session)
	local sh, sl = math.floor(session / 65536), session % 65536
	local p = (sl * 0x79b1 + ((sh * 0x79b1 + sl * 0x9e37) % 65536) * 65536) % 4294967296
	local t = math.floor(p / 512)
	if t == 0 then t = 1 end
	return t
end

-- dissect_ssam_header adds the fields of SSAM's 8-byte header (flow
-- control and handler field; the single cell's length and CRC-10 are the
-- caller's) to t, and returns a summary: kind, sequence number, handler
-- index or session, tag.
local function dissect_ssam_header(tvb, t, ndata)
	local flow = tvb(0, 2):uint()
	local kind, seq, ack = rshift(flow, 14), band(rshift(flow, 7), 0x7f), band(flow, 0x7f)
	local handler = tvb(2, 4):uint()
	t:add(f.ssam_kind, tvb(0, 1), kind)
	t:add(f.ssam_seq, tvb(0, 2), seq)
	if kind == 3 then
		-- A sync: ack 0 asks, 1 answers; the handler field is the session
		-- number, whose tag its requests and answers carry.
		local tag = session_tag(handler)
		local si = t:add(f.ssam_sync, tvb(1, 1), ack)
		if ack > 1 then si:add_proto_expert_info(ef_badsync) end
		local h = t:add(f.ssam_handler, tvb(2, 4))
		local ni = h:add(f.ssam_session, tvb(2, 4))
		if handler == 0 then ni:add_proto_expert_info(ef_badsync) end
		h:add(f.ssam_tag, tvb(2, 4), tag):set_generated()
		h:add(f.ssam_tag_hi, tvb(2, 4), rshift(tag, 7)):set_generated()
		return string.format("sync %s %d, session %d (tag 0x%06x)", syncs[ack] or "?", seq, handler, tag)
	end
	local hi, index = rshift(handler, 16), band(handler, 0xffff)
	if kind == 0 then
		-- A request: its ack field is the tag's low 7 bits.
		local tag = hi * 128 + ack
		t:add(f.ssam_tag_lo, tvb(1, 1), ack)
		local h = t:add(f.ssam_handler, tvb(2, 4))
		h:add(f.ssam_tag_hi, tvb(2, 2))
		h:add(f.ssam_index, tvb(4, 2))
		t:add(f.ssam_tag, tvb(1, 3), tag):set_generated()
		return string.format("request %d, handler %d, tag 0x%06x", seq, index, tag)
	end
	-- A reply or an ack: the ack field is the responder's acknowledgement,
	-- seq+1.
	local ai = t:add(f.ssam_ack, tvb(1, 1), ack)
	if ack ~= band(seq + 1, 0x7f) then
		ai:add_proto_expert_info(ef_refused, string.format(
			"acknowledges %d, not seq+1 (%d): the receiver refuses it (Stats.Forged)", ack, band(seq + 1, 0x7f)))
	end
	local h = t:add(f.ssam_handler, tvb(2, 4))
	h:add(f.ssam_tag_hi, tvb(2, 2))
	local ii = h:add(f.ssam_index, tvb(4, 2))
	local what = string.format("%s %d, handler %d, tag's high 16 bits 0x%04x", kinds[kind], seq, index, hi)
	if kind == 2 then
		local rejected = index == reject_index
		t:add(f.ssam_rejected, tvb(4, 2), rejected):set_generated()
		if rejected then
			ii:append_text(" (no such handler)")
			what = string.format("ack %d, no such handler, tag's high 16 bits 0x%04x", seq, hi)
		elseif index ~= 0 then
			ii:add_proto_expert_info(ef_refused, string.format(
				"an ack of handler index %d, neither 0 nor 0xFFFF: the receiver refuses it (Stats.Forged)", index))
		end
		if ndata > 0 then
			ii:add_proto_expert_info(ef_refused, "an ack with data: the receiver refuses it (Stats.Forged)")
		end
	end
	return what
end

local function dissect_ssam_cell(tvb, tree)
	local t = tree:add(xam, tvb(), "SSAM single-cell message")
	local kind = rshift(tvb(0, 1):uint(), 6)
	local chk = tvb(6, 2):uint()
	local n = rshift(chk, 10)
	local what = dissect_ssam_header(tvb, t, n)
	t:add(f.ssam_len, tvb(6, 1), n)
	local ci = t:add(f.ssam_crc, tvb(6, 2), band(chk, 0x3ff))
	local ok = crc10(tvb:bytes(0, 48), 48, true) == band(chk, 0x3ff)
	t:add(f.ssam_crc_ok, tvb(6, 2), ok)
	if not ok then ci:add_proto_expert_info(ef_crc) end
	if n > 0 and n <= 40 then t:add(f.ssam_data, tvb(8, n)) end
	t:append_text(string.format(": %s, %d bytes", what, n))
	return "SSAM " .. kinds[kind]
end

-- dissect_am_compact decodes an engine message in the compact form: a
-- short message of at most four arguments in a compact cell (those of
-- the first cell where they take two).
local function dissect_am_compact(tvb, tree)
	local t = tree:add(xam, tvb(), "AM-II engine message (compact)")
	local b0 = tvb(0, 1):uint()
	local nargs = band(rshift(b0, 1), 7)
	t:add(f.am_queue, tvb(0, 1), band(b0, 1))
	t:add(f.am_class, tvb(0, 1), 1)
	t:add(f.am_nargs, tvb(0, 1), nargs)
	t:add(f.am_dst, tvb(1, 2))
	t:add(f.am_src, tvb(3, 2))
	t:add(f.am_handler, tvb(5, 2), tvb(5, 2):uint())
	t:add(f.am_tag, tvb(7, 8))
	for i = 0, nargs - 1 do
		if tvb:len() >= 23 + 8 * i then t:add(f.am_arg, tvb(15 + 8 * i, 8)) end
	end
	local what = string.format("AM-II %s short, %d -> %d, handler %d", queues[band(b0, 1)], tvb(3, 2):uint(),
		tvb(1, 2):uint(), tvb(5, 2):uint())
	t:append_text(": " .. what)
	return what
end

-- add_acks adds n acknowledgement entries of size bytes each (a channel
-- byte, then the sequence number in the last two bytes) from offset at.
local function add_acks(tvb, t, at, n, size)
	for i = 0, n - 1 do
		local e = t:add(xam, tvb(at + size * i, size), "Acknowledgement")
		e:add(f.tr_ack_channel, tvb(at + size * i, 1))
		e:add(f.tr_ack_seq, tvb(at + size * i + size - 2, 2))
	end
end

-- compact_data_text ends the tree t of a compact DATA cell of n payload
-- bytes that what names: the engine message it carries, if one, is added,
-- and the text returned.
local function compact_data_text(tvb, t, what, n)
	if n > 31 then what = what .. string.format(", %d bytes, continued in the next cell", n) end
	t:append_text(": " .. what)
	if n >= 15 and band(tvb(15, 1):uint(), 0x80) ~= 0 then
		what = what .. "; " .. dissect_am_compact(tvb(15, math.min(n, 31)):tvb(), t)
	end
	return what
end

-- dissect_compact_acked decodes a compact DATA cell with an
-- acknowledgement (type 7, docs/wire.md), or returns nil if its length or
-- CRC-10 say it is not one.
local function dissect_compact_acked(tvb, tree)
	local tr = tvb(46, 2):uint()
	local n = rshift(tr, 10)
	if crc10(tvb:bytes(0, 47), 47, false, true) ~= band(tr, 0x3ff) then return nil end
	local t = tree:add(xam, tvb(), "Firmware transport, compact cell")
	t:add(f.tr_type, tvb(0, 1))
	t:add(f.tr_channel, tvb(1, 1))
	t:add(f.tr_seq, tvb(2, 2))
	add_acks(tvb, t, 4, 1, 3)
	t:add(f.tr_src_epoch, tvb(7, 4))
	t:add(f.tr_dst_epoch, tvb(11, 4))
	t:add(f.tr_li, tvb(46, 2))
	t:add(f.tr_crc, tvb(46, 2), band(tr, 0x3ff))
	t:add(f.tr_crc_ok, tvb(46, 2), true)
	local what = string.format("DATA (compact) ch %d seq %d, ACK ch %d seq %d",
		tvb(1, 1):uint(), tvb(2, 2):uint(), tvb(4, 1):uint(), tvb(5, 2):uint())
	return compact_data_text(tvb, t, what, n)
end

-- dissect_compact decodes a compact transport cell (docs/wire.md), or
-- returns nil if its type or CRC-10 say it is not one.
local function dissect_compact(tvb, tree)
	local crc = tvb(46, 2):uint()
	local typ = tvb(0, 1):uint()
	if typ == 7 then return dissect_compact_acked(tvb, tree) end
	if (typ ~= 5 and typ ~= 6 and typ ~= 8) or crc10(tvb:bytes(0, 46), 46, false) ~= crc then return nil end
	local n = tvb(14, 1):uint()
	if typ == 5 and n > 63 or typ == 6 and n > 10 then return nil end
	local t = tree:add(xam, tvb(), "Firmware transport, compact cell")
	t:add(f.tr_type, tvb(0, 1))
	t:add(f.tr_channel, tvb(1, 1))
	t:add(f.tr_seq, tvb(2, 2))
	if typ == 8 then
		-- the rest of the payload of the compact DATA cell before it
		t:add(f.tr_crc, tvb(46, 2))
		t:add(f.tr_crc_ok, tvb(46, 2), true)
		local what = string.format("DATA (compact, continued) ch %d seq %d", tvb(1, 1):uint(), tvb(2, 2):uint())
		t:append_text(": " .. what)
		return what
	end
	t:add(f.tr_stamp16, tvb(4, 2))
	t:add(f.tr_src_epoch, tvb(6, 4))
	t:add(f.tr_dst_epoch, tvb(10, 4))
	if typ == 6 then
		-- acknowledgements: the header's, and n entries of 3 bytes
		t:add(f.tr_k, tvb(14, 1))
		add_acks(tvb, t, 15, n, 3)
		t:add(f.tr_crc, tvb(46, 2))
		t:add(f.tr_crc_ok, tvb(46, 2), true)
		local what = string.format("ACK (compact) ch %d seq %d, %d more", tvb(1, 1):uint(), tvb(2, 2):uint(), n)
		t:append_text(": " .. what)
		return what
	end
	t:add(f.tr_clen, tvb(14, 1))
	t:add(f.tr_crc, tvb(46, 2))
	t:add(f.tr_crc_ok, tvb(46, 2), true)
	local what = string.format("DATA (compact) ch %d seq %d", tvb(1, 1):uint(), tvb(2, 2):uint())
	return compact_data_text(tvb, t, what, n)
end

local function dissect_am(tvb, tree)
	local t = tree:add(xam, tvb(), "AM-II engine message")
	local class, nargs = tvb(1, 1):uint(), tvb(2, 1):uint()
	t:add(f.am_queue, tvb(0, 1))
	t:add(f.am_class, tvb(1, 1))
	t:add(f.am_nargs, tvb(2, 1))
	t:add(f.am_reason, tvb(3, 1))
	t:add(f.am_dst, tvb(4, 2))
	t:add(f.am_src, tvb(6, 2))
	t:add(f.am_handler, tvb(8, 4))
	t:add(f.am_index, tvb(12, 4))
	t:add(f.am_tag, tvb(16, 8))
	for i = 0, nargs - 1 do
		if tvb:len() >= 32 + 8 * i then t:add(f.am_arg, tvb(24 + 8 * i, 8)) end
	end
	local o = 24 + 8 * nargs
	if class ~= 1 and tvb:len() >= o + 24 then
		t:add(f.am_offset, tvb(o, 4))
		t:add(f.am_length, tvb(o + 4, 4))
		t:add(f.am_remote, tvb(o + 8, 4))
		t:add(f.am_id, tvb(o + 12, 4))
		t:add(f.am_chunk, tvb(o + 16, 4))
		local c = tvb(o + 20, 4):uint()
		t:add(f.am_c, tvb(o + 20, 4))
		if c > 0 and tvb:len() >= o + 24 + c then t:add(f.am_data, tvb(o + 24, c)) end
	end
	local what = string.format("AM-II %s %s, %d -> %d, handler %d", queues[tvb(0, 1):uint()] or "?", classes[class] or "?",
		tvb(6, 2):uint(), tvb(4, 2):uint(), tvb(8, 4):uint())
	if tvb(3, 1):uint() ~= 0 then what = what .. " (returned: " .. (reasons[tvb(3, 1):uint()] or "?") .. ")" end
	t:append_text(": " .. what)
	return what
end

-- dissect_transport decodes a transport SDU, or returns nil if its lengths
-- do not add up.
local function dissect_transport(tvb, tree)
	local n = tvb:len()
	if n < 20 then return nil end
	local typ, plen, k = tvb(0, 1):uint(), tvb(8, 2):uint(), tvb(10, 2):uint()
	if not trtypes[typ] or 20 + 4 * k + plen ~= n then return nil end
	local t = tree:add(xam, tvb(), "Firmware transport")
	t:add(f.tr_type, tvb(0, 1))
	t:add(f.tr_channel, tvb(1, 1))
	t:add(f.tr_seq, tvb(2, 2))
	t:add(f.tr_stamp, tvb(4, 4))
	t:add(f.tr_len, tvb(8, 2))
	t:add(f.tr_k, tvb(10, 2))
	t:add(f.tr_src_epoch, tvb(12, 4))
	t:add(f.tr_dst_epoch, tvb(16, 4))
	add_acks(tvb, t, 20, k, 4)
	local what = string.format("%s ch %d seq %d, %d acks", trtypes[typ], tvb(1, 1):uint(), tvb(2, 2):uint(), k)
	if typ == 4 then
		-- A RESET's sequence field holds flags: bit 0, the sender asks for a
		-- RESET in answer (the transport's handshake).
		local answer = band(tvb(2, 2):uint(), 1) == 1
		what = string.format("RESET ch %d%s, %d acks", tvb(1, 1):uint(), answer and ", asks an answer" or "", k)
	end
	t:append_text(": " .. what)
	if typ == 1 and plen >= 24 then
		what = what .. "; " .. dissect_am(tvb(20 + 4 * k, plen):tvb(), t)
	end
	return what
end

local function dissect_pdu(pdu, vpi, vci, tree, ncells)
	if vpi == 0 and vci == xam.prefs.raw_vci then
		-- Raw frames: cells of no protocol, the first payload's first
		-- eight bytes a sequence number (the ping's round trip).
		local tvb = pdu:tvb("raw cells")
		local t = tree:add(xam, tvb(), string.format("Raw frame on %d/%d, %d cells, no protocol", vpi, vci, ncells))
		if pdu:len() < 8 then return "raw frame" end
		t:add(f.raw_seq, tvb(0, 8))
		return "raw frame, sequence " .. tostring(tvb(0, 8):uint64())
	end
	local tvb = pdu:tvb("AAL5 PDU")
	local ok, len = aal5ok(pdu)
	if ncells == 1 and not ok then
		return dissect_compact(tvb, tree) or dissect_ssam_cell(tvb, tree)
	end
	local n = pdu:len()
	local t = tree:add(xam, tvb(), string.format("AAL5 PDU on %d/%d, %d cells", vpi, vci, ncells))
	t:add(f.pdu_cells, tvb(), ncells)
	t:add(f.aal5_uu, tvb(n - 8, 1))
	t:add(f.aal5_cpi, tvb(n - 7, 1))
	t:add(f.aal5_len, tvb(n - 6, 2))
	local ci = t:add(f.aal5_crc, tvb(n - 4, 4))
	t:add(f.aal5_crc_ok, tvb(n - 4, 4), ok)
	if not ok then
		ci:add_proto_expert_info(ef_crc)
		return "AAL5 PDU (bad)"
	end
	local sdu = tvb(0, len):tvb()
	t:add(f.sdu, tvb(0, len))
	if vpi == xam.prefs.mapper_vpi and vci == xam.prefs.mapper_vci then
		t:add(f.mapper, tvb(0, len))
		return "mapper"
	end
	local what = dissect_transport(sdu, t)
	if what then return what end
	if len >= 8 and sdu(6, 2):uint() == 0 then
		local s = t:add(xam, sdu(), "SSAM bulk message")
		local what = dissect_ssam_header(sdu, s, len - 8)
		if len > 8 then s:add(f.ssam_data, sdu(8, len - 8)) end
		s:append_text(string.format(": %s, %d bytes", what, len - 8))
		return "SSAM bulk " .. kinds[rshift(sdu(0, 1):uint(), 6)]
	end
	return "AAL5 PDU"
end

function xam.dissector(tvb, pinfo, tree)
	if tvb:len() < 4 then return 0 end
	pinfo.cols.protocol = "xam"
	local t = tree:add(xam, tvb(), "xam frame")
	t:add(f.version, tvb(0, 1))
	local fl = t:add(f.flags, tvb(1, 1))
	fl:add(f.start, tvb(1, 1))
	local n = tvb(2, 2):uint()
	local ni = t:add(f.ncells, tvb(2, 2))
	if 4 + 53 * n ~= tvb:len() then
		ni:add_proto_expert_info(ef_count)
		return tvb:len()
	end
	local first = not pinfo.visited and done[pinfo.number] == nil
	if first then done[pinfo.number] = {} end
	local start = band(tvb(1, 1):uint(), 1) == 1
	for i = 0, n - 1 do
		local o = 4 + 53 * i
		local c = t:add(f.cell, tvb(o, 53), i)
		local h0, h1, h2, h3 = tvb(o, 1):uint(), tvb(o + 1, 1):uint(), tvb(o + 2, 1):uint(), tvb(o + 3, 1):uint()
		local vpi = band(h0, 0x0f) * 16 + rshift(h1, 4)
		local vci = band(h1, 0x0f) * 4096 + h2 * 16 + rshift(h3, 4)
		local pti = band(rshift(h3, 1), 7)
		c:add(f.gfc, tvb(o, 1), rshift(h0, 4))
		c:add(f.vpi, tvb(o, 2), vpi)
		c:add(f.vci, tvb(o + 1, 3), vci)
		c:add(f.pti, tvb(o + 3, 1), pti)
		c:add(f.eom, tvb(o + 3, 1), band(pti, 1) == 1)
		c:add(f.clp, tvb(o + 3, 1), band(h3, 1))
		local hi = c:add(f.hec, tvb(o + 4, 1))
		local hok = hec(tvb:bytes(o, 4)) == tvb(o + 4, 1):uint()
		c:add(f.hec_ok, tvb(o + 4, 1), hok)
		if not hok then hi:add_proto_expert_info(ef_hec) end
		c:add(f.payload, tvb(o + 5, 48))
		c:append_text(string.format(": %d/%d PTI %d%s", vpi, vci, pti, band(pti, 1) == 1 and " (end)" or ""))
		if first then
			-- A circuit's cells are reassembled per direction: both hosts
			-- send on the same circuits, and one's cells may come between
			-- the frames of the other's PDU.
			local key = tostring(pinfo.src) .. ">" .. tostring(pinfo.dst) .. "/" .. (vpi * 65536 + vci)
			if i == 0 and start then partial[key] = nil end
			local p = partial[key]
			if p == nil then
				-- It begins a PDU if an end of message on its circuit came
				-- before it, or the frame says so, or it is the first cell
				-- of a raw frame (whose cells are the whole frame's).
				local raw = vpi == 0 and vci == xam.prefs.raw_vci and i == 0
				p = { bytes = ByteArray.new(), cells = 0, whole = seen[key] or (i == 0 and start) or raw }
				partial[key] = p
			end
			p.bytes:append(tvb:bytes(o + 5, 48))
			p.cells = p.cells + 1
			if band(pti, 1) == 1 then
				table.insert(done[pinfo.number], { vpi = vpi, vci = vci, bytes = p.bytes, cells = p.cells, whole = p.whole })
				partial[key] = nil
				seen[key] = true
			end
		end
	end
	local infos = {}
	for _, d in ipairs(done[pinfo.number] or {}) do
		-- The first PDU seen on a circuit may have begun before the
		-- capture did: if its CRC fails, that is the likely reason.
		if d.whole or d.cells == 1 or aal5ok(d.bytes) then
			table.insert(infos, dissect_pdu(d.bytes, d.vpi, d.vci, t, d.cells))
		else
			t:add_proto_expert_info(ef_cont)
		end
	end
	pinfo.cols.info = string.format("%d cells%s", n, #infos > 0 and (": " .. table.concat(infos, "; ")) or "")
	return tvb:len()
end

DissectorTable.get("ethertype"):add(xam.prefs.ethertype, xam)
-- xam's UDP form: the same frame header and cells after IP and UDP.
DissectorTable.get("udp.port"):add(xam.prefs.udp_port, xam)
