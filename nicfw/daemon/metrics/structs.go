package metrics

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// A struct of counters (nicfw.EngineStats, transport.Stats, loader.Counters
// ...) is exported field by field: each unsigned integer field becomes a
// counter named prefix_field_total, the field's name in snake case (its
// JSON name where it has one), so that a counter added to the struct is
// exported without a change here.

// structFamily is the metrics of one struct type's counters.
type structFamily struct {
	typ    reflect.Type
	fields []int // the indices of the exported counter fields
	descs  []*prometheus.Desc
}

// override is a field's metric name (without prefix and _total) or help
// where the field's own will not do; empty: the field's own.
type override struct{ name, help string }

// newStructFamily describes the counters of struct value v's type, named
// prefix_<field>_total, with help saying where they come from (what, e.g.
// "the engine's counter %s (nicfw.EngineStats)"), and over overriding
// names or help for some fields, by field name.
func newStructFamily(v any, prefix, what string, over map[string]override) *structFamily {
	t := reflect.TypeOf(v)
	f := &structFamily{typ: t}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() || !isCounter(sf.Type.Kind()) {
			continue
		}
		name := snake(sf.Name)
		if tag, _, _ := strings.Cut(sf.Tag.Get("json"), ","); tag != "" && tag != "-" {
			name = tag
		}
		o := over[sf.Name]
		if o.name != "" {
			name = o.name
		}
		h := o.help
		if h == "" {
			h = fmt.Sprintf(what, sf.Name)
		}
		f.fields = append(f.fields, i)
		f.descs = append(f.descs, prometheus.NewDesc(prefix+"_"+name+"_total", h, nil, nil))
	}
	return f
}

func isCounter(k reflect.Kind) bool {
	switch k {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func (f *structFamily) describe(ch chan<- *prometheus.Desc) {
	for _, d := range f.descs {
		ch <- d
	}
}

// collect sends v's counters; v must be of the family's type.
func (f *structFamily) collect(ch chan<- prometheus.Metric, v any) {
	rv := reflect.ValueOf(v)
	if rv.Type() != f.typ {
		return
	}
	for i, fi := range f.fields {
		ch <- prometheus.MustNewConstMetric(f.descs[i], prometheus.CounterValue, float64(rv.Field(fi).Uint()))
	}
}

// snake spells a Go field name in snake case: QueueFull is queue_full,
// HECErrors hec_errors, RxFillRingEmptyDescs rx_fill_ring_empty_descs.
func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		upper := unicode.IsUpper(r)
		if i > 0 && upper && (!unicode.IsUpper(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
