//go:build ignore

// xam's eBPF programs (see doc.go for the model, docs/wire.md for the frame).
//
//   xam_xdp  XDP, on a receiving device: steer xam frames to the AF_XDP
//            socket of the receiving queue, XDP_PASS everything else.
//   xam_xdp_frags  the same, frags-aware (frames of several buffers).
//   xam_xdp_meta   xam_xdp, device-bound, with the NIC's receive timestamp
//            in the metadata in front of each frame.
//   xam_dup  tcx ingress, on a bridge port: duplicate a fraction of xam frames.
//
// Build with loader/gen.sh (bpf2go); the generated xam_bpfel.{go,o} are
// committed, so nothing here is compiled by `go build`.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// Wire format (docs/wire.md).
#define FRAME_HDR (ETH_HLEN + 4) // Ethernet II + version, flags, cells (BE16)
// The UDP form: the frame header after IPv4 (no options) or IPv6 and UDP.
#define PROTO_UDP 17
#define UDP4_OFF (ETH_HLEN + 20 + 8)
#define UDP6_OFF (ETH_HLEN + 40 + 8)
#define CELL_LEN 53
#define CELL_HDR 5
#define CELL_PAYLOAD 48
#define WIRE_VERSION 1

// MAX_SCAN_CELLS bounds the per-cell loop (HEC check, admission): 169 cells
// fill a 9000-byte MTU. Kept in step with MaxScanCells in loader.go.
#define MAX_SCAN_CELLS 169
// MAX_CELL_AT is the last cell index whose payload bytes lie within 64 KiB
// of the frame's start when the frame header is at off: the verifier
// tracks packet offsets up to 0xffff.
#define MAX_CELL_AT(off) ((0xffff - (off) - 4 - CELL_HDR - CELL_PAYLOAD) / CELL_LEN)

// Configuration flags (xam_flags), kept in step with loader.go.
#define F_DST_MAC (1 << 0)        // pass frames to another unicast MAC
#define F_NO_FRAME_CHECK (1 << 1) // skip the version/cell-count check
#define F_DROP_ON_HEC (1 << 2)    // drop frames with a bad HEC
#define F_ADMISSION (1 << 3)      // drop frames with a cell of an unadmitted VPI/VCI
#define F_NNI (1 << 4)            // cell headers are NNI (12-bit VPI)
#define F_UDP_IP4 (1 << 5)        // UDP form: IPv4 to xam_udp_ip4 only
#define F_UDP_IP6 (1 << 6)        // UDP form: IPv6 to xam_udp_ip6 only

// Mark carried by clones made by xam_dup, so they are not duplicated again
// ("xam" in ASCII).
#define DUP_MARK 0x78616d00

// tcx return codes (linux/bpf.h since 6.6; the build headers may be older).
#define TCX_NEXT (-1)

// Load-time configuration, rewritten by the loader before loading (the
// verifier then sees constants and removes the code of disabled features).
volatile const __u16 xam_ethertype = 0x88B5;
volatile const __u8 xam_dst_mac[ETH_ALEN];
volatile const __u32 xam_flags;
volatile const __u32 xam_hec_cells; // check the HEC of this many leading cells
// Non-zero: xam's frames are its UDP form (IPv4 or IPv6, UDP to this
// port) instead of raw Ethernet frames of xam_ethertype.
volatile const __u16 xam_udp_port;
// With F_UDP_IP4 or F_UDP_IP6, the one destination address taken (network
// order), and the other family passes.
volatile const __u32 xam_udp_ip4;
volatile const __u8 xam_udp_ip6[16];

// Per-CPU counters of xam_xdp. Every frame with our EtherType (and our
// destination, when filtered) is "received" and ends in exactly one of
// malformed, fault_dropped, hec_dropped, not_admitted, redirected and
// redirect_miss.
struct counters {
	__u64 received;        // ours
	__u64 redirected;      // handed to the XSKMAP entry of the rx queue
	__u64 redirect_miss;   // ours, but no socket on the rx queue: XDP_PASS
	__u64 passed;          // not ours: XDP_PASS
	__u64 other_dst;       // our EtherType to another unicast MAC (also in passed)
	__u64 malformed;       // bad version, cell count or length: XDP_DROP
	__u64 fault_dropped;   // dropped by fault injection
	__u64 fault_corrupted; // a payload byte inverted by fault injection
	__u64 hec_errors;      // cells whose HEC did not match
	__u64 hec_dropped;     // frames dropped for a bad HEC (F_DROP_ON_HEC)
	__u64 not_admitted;    // frames dropped for a cell of an unadmitted VPI/VCI
};

// Fault injection, set at run time. A threshold t makes an event happen when
// a 32-bit random number is below t: t = rate * 2^32, so 2^32 means always.
struct faults {
	__u64 drop;
	__u64 corrupt;
	__u64 seeded; // non-zero: draw from the per-CPU splitmix64 state in rng
};

struct dup_config {
	__u64 threshold; // as in struct faults
	__u64 seeded;
};

struct dup_counters {
	__u64 seen;         // frames of our EtherType (and destination), clones excluded
	__u64 duplicated;   // clones sent
	__u64 clone_errors; // bpf_clone_redirect failures
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64); // rewritten by the loader (Config.MaxQueues)
	__type(key, __u32);      // rx queue index
	__type(value, __u32);    // AF_XDP socket fd
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} stats SEC(".maps");

// Per receive queue: the frames of ours that reached the redirect, and
// those of them that found no socket on their queue (a NIC spreads frames
// over its queues; those on a queue without a socket go to the kernel).
struct queue_counters {
	__u64 frames;
	__u64 no_socket;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 64); // rewritten by the loader (Config.MaxQueues)
	__type(key, __u32);      // rx queue index
	__type(value, struct queue_counters);
} queue_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct faults);
} fault_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rng SEC(".maps");

// Admitted circuits: key VPI << 16 | VCI, value unused.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); // rewritten by the loader (Config.MaxCircuits)
	__type(key, __u32);
	__type(value, __u8);
} circuits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dup_config);
} dup_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dup_counters);
} dup_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dup_rng SEC(".maps");

// CRC-8 with generator x^8 + x^2 + x + 1 (ITU-T I.432 HEC), one byte at a time.
static const __u8 crc8_table[256] = {
	0x00, 0x07, 0x0e, 0x09, 0x1c, 0x1b, 0x12, 0x15, 0x38, 0x3f, 0x36, 0x31,
	0x24, 0x23, 0x2a, 0x2d, 0x70, 0x77, 0x7e, 0x79, 0x6c, 0x6b, 0x62, 0x65,
	0x48, 0x4f, 0x46, 0x41, 0x54, 0x53, 0x5a, 0x5d, 0xe0, 0xe7, 0xee, 0xe9,
	0xfc, 0xfb, 0xf2, 0xf5, 0xd8, 0xdf, 0xd6, 0xd1, 0xc4, 0xc3, 0xca, 0xcd,
	0x90, 0x97, 0x9e, 0x99, 0x8c, 0x8b, 0x82, 0x85, 0xa8, 0xaf, 0xa6, 0xa1,
	0xb4, 0xb3, 0xba, 0xbd, 0xc7, 0xc0, 0xc9, 0xce, 0xdb, 0xdc, 0xd5, 0xd2,
	0xff, 0xf8, 0xf1, 0xf6, 0xe3, 0xe4, 0xed, 0xea, 0xb7, 0xb0, 0xb9, 0xbe,
	0xab, 0xac, 0xa5, 0xa2, 0x8f, 0x88, 0x81, 0x86, 0x93, 0x94, 0x9d, 0x9a,
	0x27, 0x20, 0x29, 0x2e, 0x3b, 0x3c, 0x35, 0x32, 0x1f, 0x18, 0x11, 0x16,
	0x03, 0x04, 0x0d, 0x0a, 0x57, 0x50, 0x59, 0x5e, 0x4b, 0x4c, 0x45, 0x42,
	0x6f, 0x68, 0x61, 0x66, 0x73, 0x74, 0x7d, 0x7a, 0x89, 0x8e, 0x87, 0x80,
	0x95, 0x92, 0x9b, 0x9c, 0xb1, 0xb6, 0xbf, 0xb8, 0xad, 0xaa, 0xa3, 0xa4,
	0xf9, 0xfe, 0xf7, 0xf0, 0xe5, 0xe2, 0xeb, 0xec, 0xc1, 0xc6, 0xcf, 0xc8,
	0xdd, 0xda, 0xd3, 0xd4, 0x69, 0x6e, 0x67, 0x60, 0x75, 0x72, 0x7b, 0x7c,
	0x51, 0x56, 0x5f, 0x58, 0x4d, 0x4a, 0x43, 0x44, 0x19, 0x1e, 0x17, 0x10,
	0x05, 0x02, 0x0b, 0x0c, 0x21, 0x26, 0x2f, 0x28, 0x3d, 0x3a, 0x33, 0x34,
	0x4e, 0x49, 0x40, 0x47, 0x52, 0x55, 0x5c, 0x5b, 0x76, 0x71, 0x78, 0x7f,
	0x6a, 0x6d, 0x64, 0x63, 0x3e, 0x39, 0x30, 0x37, 0x22, 0x25, 0x2c, 0x2b,
	0x06, 0x01, 0x08, 0x0f, 0x1a, 0x1d, 0x14, 0x13, 0xae, 0xa9, 0xa0, 0xa7,
	0xb2, 0xb5, 0xbc, 0xbb, 0x96, 0x91, 0x98, 0x9f, 0x8a, 0x8d, 0x84, 0x83,
	0xde, 0xd9, 0xd0, 0xd7, 0xc2, 0xc5, 0xcc, 0xcb, 0xe6, 0xe1, 0xe8, 0xef,
	0xfa, 0xfd, 0xf4, 0xf3,
};

// hec returns the I.432 HEC of header bytes h[0..3]: CRC-8 XOR 0x55.
static __always_inline __u8 hec(const __u8 *h)
{
	__u8 c = crc8_table[h[0]];
	c = crc8_table[(__u8)(c ^ h[1])];
	c = crc8_table[(__u8)(c ^ h[2])];
	c = crc8_table[(__u8)(c ^ h[3])];
	return c ^ 0x55;
}

// draw returns a 32-bit random number: from the kernel's generator, or, when
// seeded, from the calling CPU's splitmix64 state in rng_map.
static __always_inline __u32 draw(void *rng_map, __u64 seeded)
{
	__u32 zero = 0;
	__u64 *s, z;

	if (!seeded)
		return bpf_get_prandom_u32();
	s = bpf_map_lookup_elem(rng_map, &zero);
	if (!s)
		return bpf_get_prandom_u32();
	*s += 0x9e3779b97f4a7c15ULL;
	z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z >> 32;
}

// circuit returns the admission key VPI << 16 | VCI of the cell header h.
static __always_inline __u32 circuit(const __u8 *h)
{
	__u32 vpi, vci;

	if (xam_flags & F_NNI)
		vpi = (__u32)h[0] << 4 | h[1] >> 4;
	else
		vpi = (__u32)(h[0] & 0x0f) << 4 | h[1] >> 4;
	vci = (__u32)(h[1] & 0x0f) << 12 | (__u32)h[2] << 4 | h[3] >> 4;
	return vpi << 16 | vci;
}

static __always_inline int for_us(const __u8 *dst)
{
	if (!(xam_flags & F_DST_MAC) || (dst[0] & 1)) // group addresses always
		return 1;
	return dst[0] == xam_dst_mac[0] && dst[1] == xam_dst_mac[1] &&
	       dst[2] == xam_dst_mac[2] && dst[3] == xam_dst_mac[3] &&
	       dst[4] == xam_dst_mac[4] && dst[5] == xam_dst_mac[5];
}

// xam_rx_at is xam_rx for a frame of ours whose xam frame header is at
// off (a constant: ETH_HLEN raw, UDP4_OFF or UDP6_OFF in the UDP form),
// counted received. With frags (xam_xdp_frags, a frags-aware program:
// frames larger than a page arrive in several buffers) the frame's length
// is the whole buffer's, and bytes past the first buffer are read and
// written through the helpers; without, every byte is in the linear part,
// which the verifier checks.
static __always_inline int xam_rx_at(struct xdp_md *ctx, const int frags, struct counters *c, const __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct faults *f;
	__u32 zero = 0, ncells = 0, len;
	long act;

	c->received++;

	len = frags ? bpf_xdp_get_buff_len(ctx) : end - data;
	if (len >= off + 4)
		ncells = (len - off - 4) / CELL_LEN;
	if (!(xam_flags & F_NO_FRAME_CHECK)) {
		__u8 *h = data + off;
		__u32 n;

		if ((void *)(h + 4) > end)
			goto malformed;
		n = (__u32)h[2] << 8 | h[3];
		if (h[0] != WIRE_VERSION || n == 0 || len != off + 4 + n * CELL_LEN)
			goto malformed;
		ncells = n;
	}

	// Faults stand for the wire: they come before the receiver's checks.
	f = bpf_map_lookup_elem(&fault_cfg, &zero);
	if (f && f->drop && draw(&rng, f->seeded) < f->drop) {
		c->fault_dropped++;
		return XDP_DROP;
	}
	if (f && f->corrupt && ncells && draw(&rng, f->seeded) < f->corrupt) {
		__u32 r = draw(&rng, f->seeded);
		__u64 cell = (r >> 8) % ncells, byte = (r & 0xff) % CELL_PAYLOAD;
		__u8 *p;

		barrier_var(cell); // keep the range checks below for the verifier
		barrier_var(byte);
		if (cell <= MAX_CELL_AT(off) && byte < CELL_PAYLOAD) {
			__u32 at = off + 4 + cell * CELL_LEN + CELL_HDR + byte;
			__u8 b;

			p = data + at;
			if ((void *)(p + 1) <= end) {
				*p ^= 0xff;
				c->fault_corrupted++;
			} else if (frags && !bpf_xdp_load_bytes(ctx, at, &b, 1)) {
				b ^= 0xff;
				if (!bpf_xdp_store_bytes(ctx, at, &b, 1))
					c->fault_corrupted++;
			}
		}
	}

	if (xam_hec_cells || (xam_flags & F_ADMISSION)) {
		// Bad HECs are counted in the map, not in a register: a count in a
		// register would differ from path to path and keep the verifier
		// from pruning (one state per count per iteration).
		__u64 errors = c->hec_errors;
		__u32 scan = ncells, i;

		if (xam_flags & F_ADMISSION) {
			if (ncells > MAX_SCAN_CELLS) { // cells we could not look at
				c->not_admitted++;
				return XDP_DROP;
			}
		} else if (scan > xam_hec_cells) {
			scan = xam_hec_cells;
		}
#pragma clang loop unroll(disable)
		for (i = 0; i < MAX_SCAN_CELLS; i++) {
			__u8 copy[CELL_HDR];
			__u8 *h = data + off + 4 + i * CELL_LEN;

			if (i >= scan)
				break;
			// A frags-aware program reads every header through the helper
			// (one path: the verifier would otherwise follow both, linear
			// and not, for each cell); the other reads the linear frame.
			if (frags) {
				if (bpf_xdp_load_bytes(ctx, off + 4 + i * CELL_LEN, copy, CELL_HDR))
					break;
				h = copy;
			} else if ((void *)(h + CELL_HDR) > end) {
				break;
			}
			if (i < xam_hec_cells && hec(h) != h[4])
				c->hec_errors++;
			if (xam_flags & F_ADMISSION) {
				__u32 key = circuit(h);

				if (!bpf_map_lookup_elem(&circuits, &key)) {
					c->not_admitted++;
					return XDP_DROP;
				}
			}
		}
		if ((xam_flags & F_DROP_ON_HEC) && c->hec_errors != errors) {
			c->hec_dropped++;
			return XDP_DROP;
		}
	}

	// A miss (no socket on this queue) returns the flags' action, XDP_PASS.
	__u32 q = ctx->rx_queue_index;
	struct queue_counters *qc = bpf_map_lookup_elem(&queue_stats, &q);

	act = bpf_redirect_map(&xsks, q, XDP_PASS);
	if (qc)
		qc->frames++;
	if (act == XDP_REDIRECT) {
		c->redirected++;
	} else {
		c->redirect_miss++;
		if (qc)
			qc->no_socket++;
	}
	return act;

malformed:
	c->malformed++;
	return XDP_DROP;
}

// xam_rx is xam_xdp's work: find whether a frame is ours (our EtherType,
// or in the UDP form our UDP port, and our destination MAC) and where its
// xam frame header is; everything else passes to the kernel.
static __always_inline int xam_rx(struct xdp_md *ctx, const int frags)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct counters *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&stats, &zero);
	if (!c)
		return XDP_PASS; // cannot happen: an array always has its entry
	if ((void *)(eth + 1) > end)
		goto pass;
	if (xam_udp_port) {
		if (eth->h_proto == bpf_htons(ETH_P_IP)) {
			struct iphdr *ip = (void *)(eth + 1);
			struct udphdr *udp = (void *)(ip + 1);

			// No options, no fragments: xam sends neither.
			if ((xam_flags & F_UDP_IP6) || (void *)(udp + 1) > end || ip->version != 4 || ip->ihl != 5 ||
			    ip->protocol != PROTO_UDP || (ip->frag_off & bpf_htons(0x3fff)) ||
			    udp->dest != bpf_htons(xam_udp_port))
				goto pass;
			if ((xam_flags & F_UDP_IP4) && ip->daddr != xam_udp_ip4)
				goto pass; // another host's, on a host that forwards
			if (!for_us(eth->h_dest))
				goto other_dst;
			return xam_rx_at(ctx, frags, c, UDP4_OFF);
		}
		if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			struct ipv6hdr *ip6 = (void *)(eth + 1);
			struct udphdr *udp = (void *)(ip6 + 1);

			if ((xam_flags & F_UDP_IP4) || (void *)(udp + 1) > end || ip6->nexthdr != PROTO_UDP ||
			    udp->dest != bpf_htons(xam_udp_port))
				goto pass;
			if (xam_flags & F_UDP_IP6) {
				const __u8 *d = (const __u8 *)&ip6->daddr;
				int i;

#pragma clang loop unroll(full)
				for (i = 0; i < 16; i++)
					if (d[i] != xam_udp_ip6[i])
						goto pass;
			}
			if (!for_us(eth->h_dest))
				goto other_dst;
			return xam_rx_at(ctx, frags, c, UDP6_OFF);
		}
		goto pass;
	}
	if (eth->h_proto != bpf_htons(xam_ethertype))
		goto pass;
	if (!for_us(eth->h_dest))
		goto other_dst;
	return xam_rx_at(ctx, frags, c, ETH_HLEN);

other_dst:
	c->other_dst++;
pass:
	c->passed++;
	return XDP_PASS;
}

// xam_xdp is the program for frames of one buffer (every kernel xam runs
// on).
SEC("xdp")
int xam_xdp(struct xdp_md *ctx)
{
	return xam_rx(ctx, 0);
}

// Receive metadata that xam_xdp_meta, a device-bound program (native
// mode), puts in front of every frame, where an AF_XDP socket finds it
// (the UMEM bytes just before the frame): the NIC's receive timestamp and
// RSS hash, read through the kernel's XDP metadata kfuncs (Linux 6.3 and
// later). Kept in step with RxMeta in loader.go.
struct xam_rx_meta {
	__u64 rx_timestamp; // ns on the NIC's clock; 0: none
	__u32 rx_hash;      // the NIC's RSS hash, if META_RX_HASH
	__u32 rss_type;     // enum xdp_rss_hash_type: what the hash covered
	__u32 flags;        // META_RX_TIMESTAMP, META_RX_HASH
	__u32 magic;        // XAM_META_MAGIC: the area is xam's
};
#define META_RX_TIMESTAMP 1
#define META_RX_HASH 2
#define XAM_META_MAGIC 0x78616d31 // "xam1"

extern int bpf_xdp_metadata_rx_timestamp(const struct xdp_md *ctx, __u64 *timestamp) __ksym;
// What an RSS hash covered (the kernel's include/net/xdp.h; not in the
// UAPI headers), bits of rss_type.
enum xdp_rss_hash_type {
	XDP_RSS_TYPE_NONE = 0,
	XDP_RSS_L3_IPV4 = 1 << 0,
	XDP_RSS_L3_IPV6 = 1 << 1,
	XDP_RSS_L3_DYNHDR = 1 << 2,
	XDP_RSS_L4 = 1 << 3,
	XDP_RSS_L4_TCP = 1 << 4,
	XDP_RSS_L4_UDP = 1 << 5,
	XDP_RSS_L4_SCTP = 1 << 6,
	XDP_RSS_L4_IPSEC = 1 << 7,
	XDP_RSS_L4_ICMP = 1 << 8,
};

extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash, enum xdp_rss_hash_type *rss_type) __ksym;

// xam_xdp_meta is xam_xdp with the receive metadata in front of each
// frame. It is loaded bound to its device (the kfuncs are the driver's).
SEC("xdp")
int xam_xdp_meta(struct xdp_md *ctx)
{
	struct xam_rx_meta *m;
	__u64 ts = 0;
	__u32 hash = 0, flags = 0;
	enum xdp_rss_hash_type rss_type = XDP_RSS_TYPE_NONE;

	if (!bpf_xdp_metadata_rx_timestamp(ctx, &ts) && ts != 0)
		flags |= META_RX_TIMESTAMP;
	if (!bpf_xdp_metadata_rx_hash(ctx, &hash, &rss_type))
		flags |= META_RX_HASH;
	if (!bpf_xdp_adjust_meta(ctx, -(int)sizeof(*m))) {
		void *data = (void *)(long)ctx->data;

		m = (void *)(long)ctx->data_meta;
		if ((void *)(m + 1) <= data) {
			m->rx_timestamp = ts;
			m->rx_hash = hash;
			m->rss_type = rss_type;
			m->flags = flags;
			m->magic = XAM_META_MAGIC;
		}
	}
	return xam_rx(ctx, 0);
}

// xam_xdp_frags is the frags-aware program (Linux 5.18 and later): native
// mode on a device whose MTU is larger than a page's frame, and frames
// larger than a page for multi-buffer AF_XDP sockets.
SEC("xdp.frags")
int xam_xdp_frags(struct xdp_md *ctx)
{
	return xam_rx(ctx, 1);
}

SEC("tc")
int xam_dup(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct dup_counters *c;
	struct dup_config *cfg;
	__u32 zero = 0, mark;

	if (skb->protocol != bpf_htons(xam_ethertype) || skb->mark == DUP_MARK)
		return TCX_NEXT;
	if ((void *)(eth + 1) > end || !for_us(eth->h_dest))
		return TCX_NEXT;
	c = bpf_map_lookup_elem(&dup_stats, &zero);
	cfg = bpf_map_lookup_elem(&dup_cfg, &zero);
	if (!c || !cfg)
		return TCX_NEXT;
	c->seen++;
	if (!cfg->threshold || draw(&dup_rng, cfg->seeded) >= cfg->threshold)
		return TCX_NEXT;

	// The clone enters this device's ingress again, after the frame,
	// through this program, which lets it pass because of its mark. It
	// goes to the ingress, not to an egress, because the receive path
	// clears the "redirected" flag that bpf_clone_redirect sets: a
	// receiver with generic XDP skips redirected skbs (they would reach
	// its stack, not its AF_XDP socket).
	mark = skb->mark;
	skb->mark = DUP_MARK;
	if (bpf_clone_redirect(skb, skb->ifindex, BPF_F_INGRESS))
		c->clone_errors++;
	else
		c->duplicated++;
	skb->mark = mark;
	return TCX_NEXT;
}
