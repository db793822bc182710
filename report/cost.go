package report

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	// yaml v2: v3 is the simulator's, which the image's build leaves out.
	"go.yaml.in/yaml/v2"
)

// hoursPerYear amortises a purchase over calendar hours.
const hoursPerYear = 8760

// AnyGPUType is the price key of every type no other key names.
const AnyGPUType = "*"

// DefaultCurrency is the currency of prices that name none.
const DefaultCurrency = "USD"

// Price is what one GPU of a type costs: per GPU-hour (a cloud's or a
// rental's price, or on-premises costs such as hosting), its purchase
// price spread over AmortizationYears, and the energy it draws, measured
// (gpuxray_device_energy_joules_total) and priced per kWh.
type Price struct {
	PerHour           float64 `yaml:"per_hour"`
	PurchasePrice     float64 `yaml:"purchase_price"`
	AmortizationYears float64 `yaml:"amortization_years"`
	PowerPerKWh       float64 `yaml:"power_per_kwh"`
}

// Capital is the price per GPU-hour without the energy: PerHour plus the
// purchase price over the amortisation's hours.
func (p Price) Capital() float64 {
	c := p.PerHour
	if p.PurchasePrice > 0 && p.AmortizationYears > 0 {
		c += p.PurchasePrice / (p.AmortizationYears * hoursPerYear)
	}
	return c
}

// PriceSheet is the prices of GPU types, by GPU Feature Discovery's
// product label (NVIDIA-H100-80GB-HBM3), AnyGPUType for every other type.
type PriceSheet struct {
	Currency string
	Types    map[string]Price
}

// Empty is whether the sheet prices nothing.
func (s PriceSheet) Empty() bool { return len(s.Types) == 0 }

// For is the price of gpuType: its own, else AnyGPUType's.
func (s PriceSheet) For(gpuType string) (Price, bool) {
	if p, ok := s.Types[gpuType]; ok {
		return p, true
	}
	p, ok := s.Types[AnyGPUType]
	return p, ok
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// ValidCurrency is whether code is an ISO 4217 code's shape (three capitals).
func ValidCurrency(code string) bool { return currencyRE.MatchString(code) }

// priceKey is a price's GPU type as the report keys types: AnyGPUType, or
// the GFD product label of a type given as the label or as NVML's name
// ("NVIDIA H100 80GB HBM3").
func priceKey(t string) (string, error) {
	t = strings.TrimSpace(t)
	if t == AnyGPUType {
		return t, nil
	}
	k := GPUProduct(t)
	if k == "" {
		return "", fmt.Errorf("%q is not a GPU type (a GFD product label such as NVIDIA-H100-80GB-HBM3, or *)", t)
	}
	return k, nil
}

// ParsePrice reads a --price value, GPU_TYPE=AMOUNT: AMOUNT per GPU-hour
// of GPU_TYPE (a GFD product label, or * for every other type).
func ParsePrice(v string) (string, float64, error) {
	t, a, ok := strings.Cut(v, "=")
	if !ok {
		return "", 0, fmt.Errorf("price %q is not GPU_TYPE=AMOUNT (NVIDIA-H100-80GB-HBM3=2.5, or *=1.8)", v)
	}
	key, err := priceKey(t)
	if err != nil {
		return "", 0, fmt.Errorf("price %q: %w", v, err)
	}
	amount, err := strconv.ParseFloat(strings.TrimSpace(a), 64)
	if err != nil || math.IsNaN(amount) || math.IsInf(amount, 0) || amount < 0 {
		return "", 0, fmt.Errorf("price %q: %q is not an amount of at least 0", v, a)
	}
	return key, amount, nil
}

// priceFile is the price file's shape (docs/report.md, "Prices").
type priceFile struct {
	Currency string           `yaml:"currency"`
	GPUTypes map[string]Price `yaml:"gpu_types"`
}

// maxPriceFileBytes bounds the price file; a real one is a few lines.
const maxPriceFileBytes = 1 << 20

// LoadPriceFile reads a price file: a currency and, by GPU type, per_hour,
// purchase_price, amortization_years and power_per_kwh. Its errors are one
// sentence naming the file.
func LoadPriceFile(path string) (PriceSheet, error) {
	f, err := os.Open(path)
	if err != nil {
		return PriceSheet{}, fmt.Errorf("price file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPriceFileBytes+1))
	if err != nil {
		return PriceSheet{}, fmt.Errorf("price file %s: %w", path, err)
	}
	if len(data) > maxPriceFileBytes {
		return PriceSheet{}, fmt.Errorf("price file %s is larger than 1 MiB", path)
	}
	return ParsePriceFile(data, path)
}

// ParsePriceFile parses a price file's content; name is the file named in
// errors.
func ParsePriceFile(data []byte, name string) (PriceSheet, error) {
	var pf priceFile
	if len(bytes.TrimSpace(data)) == 0 {
		return PriceSheet{}, fmt.Errorf("price file %s is empty", name)
	}
	if err := yaml.UnmarshalStrict(data, &pf); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "unmarshal errors:", "")), " ")
		return PriceSheet{}, fmt.Errorf("price file %s: %s", name, msg)
	}
	s := PriceSheet{Currency: pf.Currency, Types: map[string]Price{}}
	if s.Currency != "" && !ValidCurrency(s.Currency) {
		return PriceSheet{}, fmt.Errorf("price file %s: currency %q is not a three-letter ISO 4217 code such as USD or EUR", name, s.Currency)
	}
	if len(pf.GPUTypes) == 0 {
		return PriceSheet{}, fmt.Errorf("price file %s prices no GPU type (gpu_types)", name)
	}
	keys := make([]string, 0, len(pf.GPUTypes))
	for k := range pf.GPUTypes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, t := range keys {
		p := pf.GPUTypes[t]
		key, err := priceKey(t)
		if err != nil {
			return PriceSheet{}, fmt.Errorf("price file %s: %w", name, err)
		}
		if _, dup := s.Types[key]; dup {
			return PriceSheet{}, fmt.Errorf("price file %s: %s is priced twice", name, key)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"per_hour", p.PerHour}, {"purchase_price", p.PurchasePrice}, {"amortization_years", p.AmortizationYears}, {"power_per_kwh", p.PowerPerKWh}} {
			if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
				return PriceSheet{}, fmt.Errorf("price file %s: %s: %s %g is not an amount of at least 0", name, t, f.name, f.v)
			}
		}
		if p.PurchasePrice > 0 && p.AmortizationYears <= 0 {
			return PriceSheet{}, fmt.Errorf("price file %s: %s: a purchase_price needs amortization_years", name, t)
		}
		if p.AmortizationYears > 0 && p.PurchasePrice <= 0 {
			return PriceSheet{}, fmt.Errorf("price file %s: %s: amortization_years without a purchase_price", name, t)
		}
		s.Types[key] = p
	}
	return s, nil
}

// Cost is the funnel in currency (the report's JSON `cost`).
type Cost struct {
	Currency string      `json:"currency"`
	All      CostFigures `json:"all"`
	Peak     CostFigures `json:"peak"`
}

// CostFigures are the funnel's GPU-hours priced: capital per GPU-hour of
// each type, and each state's measured energy at the type's price per kWh.
type CostFigures struct {
	Owned         float64 `json:"owned"`
	Allocated     float64 `json:"allocated"`
	Active        float64 `json:"active"`
	IdleAllocated float64 `json:"idle_allocated"`
	Unallocated   float64 `json:"unallocated"`
}

func (c *CostFigures) add(o CostFigures) {
	c.Owned += o.Owned
	c.Allocated += o.Allocated
	c.Active += o.Active
	c.IdleAllocated += o.IdleAllocated
	c.Unallocated += o.Unallocated
}

// typeHours are one GPU type's funnel in GPU-hours and its energy in kWh
// by state, in one window or both.
type typeHours struct {
	owned, allocated, active, idle, unallocated float64
	// kWh drawn while observed, allocated, idle allocated, unallocated.
	eOwned, eAllocated, eIdle, eUnallocated float64
}

func (h *typeHours) add(o typeHours) {
	h.owned += o.owned
	h.allocated += o.allocated
	h.active += o.active
	h.idle += o.idle
	h.unallocated += o.unallocated
	h.eOwned += o.eOwned
	h.eAllocated += o.eAllocated
	h.eIdle += o.eIdle
	h.eUnallocated += o.eUnallocated
}

// priced is h at price p: capital per GPU-hour plus the energy of each
// state. Active time is allocated time weighted by utilization, so its
// energy is the allocated energy in that proportion.
func (h typeHours) priced(p Price) CostFigures {
	c, e := p.Capital(), p.PowerPerKWh
	return CostFigures{
		Owned:         c*h.owned + e*h.eOwned,
		Allocated:     c*h.allocated + e*h.eAllocated,
		Active:        c*h.active + e*h.eAllocated*ratio(h.active, h.allocated),
		IdleAllocated: c*h.idle + e*h.eIdle,
		Unallocated:   c*h.unallocated + e*h.eUnallocated,
	}
}

// TypeMoney is one GPU type's prices and costs.
type TypeMoney struct {
	GPUType string `json:"gpu_type"`
	// Priced is false for a type no price names (and no * price): its
	// GPU-hours are in no cost.
	Priced bool `json:"priced"`
	// CapitalPerGPUHour is per_hour plus the amortised purchase;
	// PowerPerKWh the energy's price; MeanPowerWatts what its GPUs drew on
	// average while observed.
	CapitalPerGPUHour float64 `json:"capital_per_gpu_hour"`
	PowerPerKWh       float64 `json:"power_per_kwh"`
	MeanPowerWatts    float64 `json:"mean_power_watts"`
	// IdleRate and AllocatedRate are the price of an idle and of an
	// allocated GPU-hour, with the energy such hours drew.
	IdleRate      float64 `json:"idle_rate"`
	AllocatedRate float64 `json:"allocated_rate"`
	// OwnedGPUHours and IdleAllocatedGPUHours (at peak: Peak*) are what
	// the costs price.
	OwnedGPUHours             float64     `json:"owned_gpu_hours"`
	IdleAllocatedGPUHours     float64     `json:"idle_allocated_gpu_hours"`
	PeakIdleAllocatedGPUHours float64     `json:"peak_idle_allocated_gpu_hours"`
	All                       CostFigures `json:"all"`
	Peak                      CostFigures `json:"peak"`
	// PurchasePrice is a GPU's purchase price, 0 when not given.
	PurchasePrice float64 `json:"purchase_price"`

	price Price
}

// priceTypes prices each type's hours, all and at peak; the cost sums the
// priced types. Types are sorted by name.
func priceTypes(all, peak map[string]typeHours, sheet PriceSheet) (Cost, []TypeMoney) {
	cost := Cost{Currency: sheet.Currency}
	names := make([]string, 0, len(all))
	for t := range all {
		names = append(names, t)
	}
	slices.Sort(names)
	out := make([]TypeMoney, 0, len(names))
	for _, t := range names {
		h, hp := all[t], peak[t]
		p, ok := sheet.For(t)
		tm := TypeMoney{GPUType: t, Priced: ok, OwnedGPUHours: h.owned, IdleAllocatedGPUHours: h.idle, PeakIdleAllocatedGPUHours: hp.idle,
			MeanPowerWatts: 1000 * ratio(h.eOwned, h.owned), price: p}
		if ok {
			tm.CapitalPerGPUHour, tm.PowerPerKWh, tm.PurchasePrice = p.Capital(), p.PowerPerKWh, p.PurchasePrice
			tm.IdleRate = p.Capital() + p.PowerPerKWh*ratio(h.eIdle, h.idle)
			tm.AllocatedRate = p.Capital() + p.PowerPerKWh*ratio(h.eAllocated, h.allocated)
			tm.All, tm.Peak = h.priced(p), hp.priced(p)
			cost.All.add(tm.All)
			cost.Peak.add(tm.Peak)
		}
		out = append(out, tm)
	}
	return cost, out
}

// migShare is the share of a GPU of type gpuType that a MIG instance of
// profile ("3g.40gb") is, by compute slices: 7 a GPU, 4 on an A30; 1 for
// a whole GPU (profile "").
func migShare(profile, gpuType string) float64 {
	if profile == "" {
		return 1
	}
	c, ok := migCompute(profile)
	if !ok {
		return 1
	}
	slices := 7.0
	if strings.Contains(gpuType, "A30") {
		slices = 4
	}
	return min(1, float64(c)/slices)
}

// typedWork is a workload's pod-hours by the GPU type they ran on (for a
// MIG instance, its GPU's type) and the share of that GPU.
type typedWork struct {
	gpuType string
	share   float64
	// idle, allocated: all hours; peakIdle, peakAllocated: at peak.
	idle, allocated, peakIdle, peakAllocated float64
}

// workloadCost prices a workload's pod-hours: idle at its types' idle
// rate, allocated at their allocated rate, each MIG instance by its share
// of its GPU. ok is false when some of its hours ran on an unpriced type.
func workloadCost(ws []typedWork, types map[string]TypeMoney) (idle, peakIdle, allocated float64, ok bool) {
	ok = true
	for _, w := range ws {
		t, found := types[w.gpuType]
		if !found || !t.Priced {
			if w.allocated > 0 || w.idle > 0 {
				ok = false
			}
			continue
		}
		idle += w.idle * w.share * t.IdleRate
		peakIdle += w.peakIdle * w.share * t.IdleRate
		allocated += w.allocated * w.share * t.AllocatedRate
	}
	return idle, peakIdle, allocated, ok
}

// Lever kinds, in the order the report lists them.
const (
	LeverCulling    = "culling"
	LeverPreemption = "preemption"
	LeverQuota      = "quota"
	// LeverDefragmentation: waiting that idle GPUs of its type could have
	// run, but on no one node.
	LeverDefragmentation = "defragmentation"
	LeverRightSizing     = "right_sizing"
)

// Lever is what one fix is worth on the verdict's basis (peak, or all
// hours when the range has no peak time): the GPU-hours it gives back and
// their price. Culling gives back the idle allocated GPU-hours (their cost
// is what idle allocation cost); preemption and quota the waiting that
// idle GPUs could have run by taking them back, defragmentation the
// waiting they could have run had they been on one node (GPU time not to
// be bought); right-sizing what the hints free.
type Lever struct {
	Lever    string   `json:"lever"`
	GPUHours float64  `json:"gpu_hours"`
	Cost     *float64 `json:"cost"`
}

// ShortfallCost is what the verdict's missing GPUs would cost, by type.
type ShortfallCost struct {
	GPUTypes []ShortfallType `json:"gpu_types"`
	// PurchaseCost sums the types' purchase costs, nil when a type has no
	// purchase price; YearlyCost their price for a year of GPU-hours.
	PurchaseCost *float64 `json:"purchase_cost"`
	YearlyCost   *float64 `json:"yearly_cost"`
}

// ShortfallType is the missing GPUs of one type ("any" for waiters that
// select none, priced at * or at the cluster's mean rate).
type ShortfallType struct {
	GPUType      string   `json:"gpu_type"`
	GPUs         int      `json:"gpus"`
	PurchaseCost *float64 `json:"purchase_cost"`
	YearlyCost   *float64 `json:"yearly_cost"`
}
