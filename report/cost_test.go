package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePrice(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, key string
		amount  float64
		err     string
	}{
		{"NVIDIA-H100-80GB-HBM3=2.5", "NVIDIA-H100-80GB-HBM3", 2.5, ""},
		{"NVIDIA H100 80GB HBM3=2.5", "NVIDIA-H100-80GB-HBM3", 2.5, ""},
		{"*=1.8", "*", 1.8, ""},
		{"NVIDIA-L4=0", "NVIDIA-L4", 0, ""},
		{"NVIDIA-L4", "", 0, `price "NVIDIA-L4" is not GPU_TYPE=AMOUNT`},
		{"=3", "", 0, `price "=3": "" is not a GPU type`},
		{"NVIDIA-L4=-1", "", 0, `price "NVIDIA-L4=-1": "-1" is not an amount of at least 0`},
		{"NVIDIA-L4=cheap", "", 0, `"cheap" is not an amount`},
		{"NVIDIA-L4=NaN", "", 0, `"NaN" is not an amount`},
	} {
		k, a, err := ParsePrice(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || k != tt.key || a != tt.amount {
			t.Errorf("%s: %q %g %v", tt.in, k, a, err)
		}
	}
}

func TestPriceFile(t *testing.T) {
	t.Parallel()
	const good = `currency: EUR
gpu_types:
  NVIDIA-H100-80GB-HBM3: {purchase_price: 35040, amortization_years: 4, power_per_kwh: 0.25, per_hour: 0.1}
  NVIDIA A100-SXM4-80GB: {per_hour: 1.2}
  "*": {per_hour: 2}
`
	s, err := ParsePriceFile([]byte(good), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Currency != "EUR" || len(s.Types) != 3 {
		t.Fatalf("sheet %+v", s)
	}
	h, _ := s.For("NVIDIA-H100-80GB-HBM3")
	approx(t, "H100 capital", h.Capital(), 0.1+35040.0/(4*8760))
	if a, ok := s.For("NVIDIA-A100-SXM4-80GB"); !ok || a.PerHour != 1.2 {
		t.Errorf("A100 by its NVML name: %+v %v", a, ok)
	}
	if o, ok := s.For("NVIDIA-L4"); !ok || o.PerHour != 2 {
		t.Errorf("other type: %+v %v", o, ok)
	}
	for _, tt := range []struct{ name, in, err string }{
		{"empty", "", "price file p.yaml is empty"},
		{"unknown key", "gpu_types:\n  NVIDIA-L4: {hourly: 1}\n", "field hourly not found"},
		{"no types", "currency: USD\n", "prices no GPU type"},
		{"currency", "currency: dollars\ngpu_types: {'*': {per_hour: 1}}\n", `currency "dollars" is not a three-letter ISO 4217 code`},
		{"negative", "gpu_types: {'*': {per_hour: -1}}\n", "*: per_hour -1 is not an amount of at least 0"},
		{"purchase without years", "gpu_types: {NVIDIA-L4: {purchase_price: 3000}}\n", "NVIDIA-L4: a purchase_price needs amortization_years"},
		{"years without purchase", "gpu_types: {NVIDIA-L4: {amortization_years: 3}}\n", "amortization_years without a purchase_price"},
		{"twice", "gpu_types: {NVIDIA-L4: {per_hour: 1}, NVIDIA L4: {per_hour: 2}}\n", "NVIDIA-L4 is priced twice"},
		{"not yaml", "gpu_types: [", "price file p.yaml:"},
	} {
		if _, err := ParsePriceFile([]byte(tt.in), "p.yaml"); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "prices.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadPriceFile(path); err != nil || s.Currency != "EUR" {
		t.Errorf("LoadPriceFile: %+v %v", s, err)
	}
	if _, err := LoadPriceFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "price file:") {
		t.Errorf("missing file: %v", err)
	}
}

// TestPriceTypes: idle cost = idle GPU-hours × price, per type; energy at
// its price per kWh, by state; an unpriced type in no cost.
func TestPriceTypes(t *testing.T) {
	t.Parallel()
	sheet := PriceSheet{Currency: "USD", Types: map[string]Price{
		"NVIDIA-H100-80GB-HBM3": {PerHour: 4},
		"NVIDIA-A100-SXM4-40GB": {PurchasePrice: 8760 * 3, AmortizationYears: 3, PowerPerKWh: 0.5},
	}}
	all := map[string]typeHours{
		"NVIDIA-H100-80GB-HBM3": {owned: 100, allocated: 80, active: 40, idle: 30, unallocated: 20},
		"NVIDIA-A100-SXM4-40GB": {owned: 50, allocated: 50, active: 10, idle: 25, eOwned: 20, eAllocated: 20, eIdle: 5},
		"NVIDIA-L4":             {owned: 10, idle: 10},
	}
	peak := map[string]typeHours{"NVIDIA-H100-80GB-HBM3": {owned: 50, idle: 10}}
	cost, tms := priceTypes(all, peak, sheet)
	approx(t, "owned", cost.All.Owned, 100*4+50*1+20*0.5)
	approx(t, "idle", cost.All.IdleAllocated, 30*4+25*1+5*0.5)
	approx(t, "active", cost.All.Active, 40*4+10*1+20*0.5*10/50)
	approx(t, "unallocated", cost.All.Unallocated, 20*4)
	approx(t, "peak idle", cost.Peak.IdleAllocated, 10*4)
	if len(tms) != 3 || tms[2].GPUType != "NVIDIA-L4" || tms[2].Priced {
		t.Fatalf("types %+v", tms)
	}
	approx(t, "A100 idle rate", tms[0].IdleRate, 1+0.5*5.0/25)
	approx(t, "A100 mean power W", tms[0].MeanPowerWatts, 1000*20.0/50)

	types := map[string]TypeMoney{}
	for _, tm := range tms {
		types[tm.GPUType] = tm
	}
	// A workload on a whole H100 and a 3g slice of an A100.
	idle, peakIdle, alloc, ok := workloadCost([]typedWork{
		{gpuType: "NVIDIA-H100-80GB-HBM3", share: 1, idle: 5, peakIdle: 2, allocated: 10},
		{gpuType: "NVIDIA-A100-SXM4-40GB", share: migShare("3g.20gb", "NVIDIA-A100-SXM4-40GB"), idle: 7, allocated: 7},
	}, types)
	approx(t, "workload idle", idle, 5*4+7*3.0/7*tms[0].IdleRate)
	approx(t, "workload peak idle", peakIdle, 2*4)
	approx(t, "workload allocated", alloc, 10*4+7*3.0/7*tms[0].AllocatedRate)
	if !ok {
		t.Error("priced workload not ok")
	}
	if _, _, _, ok := workloadCost([]typedWork{{gpuType: "NVIDIA-L4", share: 1, idle: 1}}, types); ok {
		t.Error("a workload on an unpriced type is ok")
	}
	approx(t, "A30 slice", migShare("2g.12gb", "NVIDIA-A30"), 0.5)
	approx(t, "whole GPU", migShare("", "NVIDIA-H100-80GB-HBM3"), 1)
}

// TestValueJSONDocumented: every field of the work, money and forecast
// figures, filled in, is in docs/report.md.
func TestValueJSONDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	one := 1.0
	now := time.Now()
	work := Work{Engine: &EngineUse{Kinds: []string{"vllm"}, Models: []string{"m"}}, TokensPerGPUHour: &one, IdleCost: &one}
	r := &Report{
		TopWorkloads: []Workload{{Work: work}}, TopModels: []Model{{Work: work}},
		Hints: []Hint{{HintMath: HintMath{Arithmetic: map[string]float64{}, Target: "x", Saving: &one}}},
		Cost:  &Cost{},
		Money: &Money{GPUTypes: []TypeMoney{{}}, Unpriced: []string{"x"}, Levers: []Lever{{Cost: &one}},
			Shortfall: &ShortfallCost{GPUTypes: []ShortfallType{{PurchaseCost: &one}}}},
		Forecast: Forecast{GPUTypes: []ForecastType{{ShortFrom: &now, Weeks: []ForecastWeek{{}}}}},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !strings.Contains(path, "arithmetic") && !bytes.Contains(doc, []byte("`"+k+"`")) {
					t.Errorf("JSON field %s%s is not documented in docs/report.md", path, k)
				}
				walk(path+k+".", e)
			}
		case []any:
			for _, e := range x {
				walk(path, e)
			}
		}
	}
	for _, k := range []string{"top_workloads", "top_models", "hints", "cost", "money", "forecast"} {
		walk(k+".", v[k])
	}
	// The contract's names, exactly.
	for _, k := range []string{"idle_cost", "peak_idle_cost", "tokens_per_gpu_hour", "tokens_per_active_gpu_hour"} {
		if _, ok := v["top_workloads"].([]any)[0].(map[string]any)[k]; !ok {
			t.Errorf("top_workloads[] has no %s", k)
		}
	}
	for _, k := range []string{"currency", "all", "peak"} {
		if _, ok := v["cost"].(map[string]any)[k]; !ok {
			t.Errorf("cost has no %s", k)
		}
	}
	for _, k := range []string{"owned", "allocated", "active", "idle_allocated", "unallocated"} {
		if _, ok := v["cost"].(map[string]any)["all"].(map[string]any)[k]; !ok {
			t.Errorf("cost.all has no %s", k)
		}
	}
	ft := v["forecast"].(map[string]any)
	if _, ok := ft["enough_data"]; !ok {
		t.Error("forecast has no enough_data")
	}
	for _, k := range []string{"gpu_type", "short_from", "short_from_earliest", "short_from_latest", "weekly_growth_gpus"} {
		if _, ok := ft["gpu_types"].([]any)[0].(map[string]any)[k]; !ok {
			t.Errorf("forecast.gpu_types[] has no %s", k)
		}
	}
}

// TestLeversAndShortfall: culling is the idle allocated cost at peak;
// preemption and quota their waiting at the cluster's idle rate;
// right-sizing the hints' savings; the shortfall bought at the purchase
// price and rented a year at the allocated rate.
func TestLeversAndShortfall(t *testing.T) {
	t.Parallel()
	sheet := PriceSheet{Currency: "EUR", Types: map[string]Price{AnyGPUType: {PurchasePrice: 30000, AmortizationYears: 4, PerHour: 0.5}}}
	all := map[string]typeHours{"NVIDIA-H100-80GB-HBM3": {owned: 100, allocated: 80, idle: 20, active: 50}}
	cost, tms := priceTypes(all, map[string]typeHours{"NVIDIA-H100-80GB-HBM3": {owned: 50, allocated: 40, idle: 10}}, sheet)
	types := map[string]TypeMoney{}
	for _, tm := range tms {
		types[tm.GPUType] = tm
	}
	rate := 0.5 + 30000.0/(4*8760)
	saving := 12.0
	r := &Report{Cost: &cost, Demand: Demand{Basis: BasisPeak}, Verdict: Verdict{GPUsShort: 3},
		Hints: []Hint{{HintMath: HintMath{FreesGPUHours: 6, Saving: &saving}}, {HintMath: HintMath{FreesGPUHours: 2, Saving: &saving}}}}
	r.Funnel.Peak.Idle = 10
	r.Queue.Peak = QueueFigures{PreemptionGPUHours: 4, QuotaGPUHours: 1, FragmentedGPUHours: 2}
	ls := levers(r, types)
	// By type: the H100 waiters' preemption at the H100's idle rate, the
	// waiters of any type's at the cluster's (the same here).
	r.Queue.GPUTypes = []QueueGPUType{{GPUType: "NVIDIA-H100-80GB-HBM3", Peak: QueueFigures{PreemptionGPUHours: 3}}, {GPUType: GPUTypeAny, Peak: QueueFigures{PreemptionGPUHours: 1}}}
	if byType := levers(r, types); *byType[1].Cost != 4*rate {
		t.Errorf("preemption by type: %g, want %g", *byType[1].Cost, 4*rate)
	}
	want := []struct {
		lever         string
		hours, amount float64
	}{{LeverCulling, 10, 10 * rate}, {LeverPreemption, 4, 4 * rate}, {LeverQuota, 1, rate}, {LeverDefragmentation, 2, 2 * rate}, {LeverRightSizing, 8, 24}}
	if len(ls) != len(want) {
		t.Fatalf("levers %+v", ls)
	}
	for i, w := range want {
		if ls[i].Lever != w.lever || ls[i].Cost == nil {
			t.Fatalf("lever %d: %+v, want %s", i, ls[i], w.lever)
		}
		approx(t, w.lever+" GPU-hours", ls[i].GPUHours, w.hours)
		approx(t, w.lever+" worth", *ls[i].Cost, w.amount)
	}
	sc := shortfallCost(r, types, sheet)
	if sc == nil || len(sc.GPUTypes) != 1 || sc.PurchaseCost == nil || sc.YearlyCost == nil {
		t.Fatalf("shortfall %+v", sc)
	}
	approx(t, "purchase", *sc.PurchaseCost, 3*30000)
	approx(t, "a year", *sc.YearlyCost, 3*rate*8760)
	r.Verdict.GPUsShort = 0
	if shortfallCost(r, types, sheet) != nil {
		t.Error("no shortfall, yet a cost")
	}
}

// TestModelsWork: a model's tokens and idle cost are its workloads'.
func TestModelsWork(t *testing.T) {
	t.Parallel()
	cost := func(v float64) *float64 { return &v }
	a := Workload{Namespace: "a", Name: "x", Model: "llama", Usage: Usage{Allocated: 10},
		Work: Work{Engine: &EngineUse{Kinds: []string{EngineVLLM}, Tokens: 1e6, TokensKnown: true, AllocatedGPUHours: 10, ActiveGPUHours: 5, PeakTokens: 5e5, PeakAllocatedGPUHours: 4},
			IdleCost: cost(3), PeakIdleCost: cost(1), allocatedCost: cost(40)}}
	b := Workload{Namespace: "b", Name: "y", Model: "llama", Usage: Usage{Allocated: 10},
		Work: Work{Engine: &EngineUse{Kinds: []string{EngineSGLang}, Tokens: 3e6, TokensKnown: true, AllocatedGPUHours: 10, ActiveGPUHours: 10, PeakTokens: 1e6, PeakAllocatedGPUHours: 6},
			IdleCost: cost(2), PeakIdleCost: cost(2), allocatedCost: cost(60)}}
	ws := []Workload{a, b}
	byKey := map[wlKey]Workload{{"a", "", "x", "llama"}: a, {"b", "", "y", "llama"}: b}
	ms := []Model{{Model: "llama"}}
	modelsWork(ms, ws, byKey)
	m := ms[0]
	if m.Engine == nil || len(m.Engine.Kinds) != 2 {
		t.Fatalf("model engine %+v", m.Engine)
	}
	approx(t, "tokens per GPU-hour", *m.TokensPerGPUHour, 4e6/20)
	approx(t, "tokens per active GPU-hour", *m.TokensPerActiveGPUHour, 4e6/15)
	approx(t, "at peak", *m.PeakTokensPerGPUHour, 1.5e6/10)
	approx(t, "idle cost", *m.IdleCost, 5)
	approx(t, "cost per million tokens", *m.CostPerMillionTokens, 100/4.0)
	// The workloads' own engines are left as they were.
	if len(a.Engine.Kinds) != 1 {
		t.Errorf("a's engine changed: %+v", a.Engine)
	}
}
