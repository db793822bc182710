package report

import (
	"cmp"
	"math"
	"slices"
)

// The parts the waiting of a step is split into, in the order they are
// served (docs/report.md, "The queue").
const (
	partFree = iota
	partQuota
	partPreemption
	partOutranked
	partFragmented
	partOtherType
	partShortfall
	// partHeldBack is free GPUs a waiter Kueue held back could have run
	// on: it is quota (QuotaGPUHours), told apart for the sentence.
	partHeldBack
	numQueueParts
)

// anyType is the GPU type of a waiter that selects none.
const anyType = -1

// capEps is the GPU fraction below which a capacity or a need is spent:
// rates read at step boundaries are not exact.
const capEps = 1e-9

// podSet is pods of one size: each asks for gpus GPUs of one node.
type podSet struct {
	gpus  float64
	count float64
}

// queueWaiter is one waiter at a step: a pending pod, a suspended Kueue
// workload, or the part of a ClusterQueue's pending GPUs no pod or
// workload series explains. Its pod sets must each find room on one node
// of its GPU type; a gang's pods run all at once or not at all.
type queueWaiter struct {
	key   int // index of its QueueClass
	gtype int // index of the GPU type it selects, or anyType
	rank  float64
	pods  []podSet
	gang  bool
	// kueue: Kueue holds it back (a suspended workload): free GPUs that
	// could have run it wait on Kueue's quota, not on the scheduler.
	kueue bool
}

func (w queueWaiter) gpus() float64 {
	var s float64
	for _, p := range w.pods {
		s += max(0, p.gpus) * max(0, p.count)
	}
	return s
}

// queueNode is a node's GPUs of one type at a step: the mean number free
// (held by nobody), and its holders' idle ones in queueStep.idle.
type queueNode struct {
	gtype int
	free  float64
}

// queueIdle is the idle GPUs one holder workload held on one node at a
// step.
type queueIdle struct {
	key  int // index of its QueueHolder
	node int // index of its queueNode
	rank float64
	cq   string
	gpus float64
}

// queueStep is one cluster at one step: who waits, and the supply that
// could have run them, in GPUs.
type queueStep struct {
	types    int // GPU types: waiters' and nodes' gtype are below it
	waiters  []queueWaiter
	nodes    []queueNode
	idle     []queueIdle
	borrowed map[string]float64 // ClusterQueue → GPUs used beyond its nominal quota
}

// queueMatch is how a step's waiting was served: per waiter (as
// queueStep.waiters) its GPUs by part; per idle holder (as queueStep.idle)
// its GPUs that waiters used, by part, and the part of its idle GPUs that
// was on borrowed quota.
type queueMatch struct {
	waiter        [][numQueueParts]float64
	idle          [][numQueueParts]float64
	borrowedShare []float64
}

// Levels of supply a pass may draw on, each adding to the one before.
const (
	levelFree      = 1 // free GPUs
	levelQuota     = 2 // + idle GPUs on borrowed quota
	levelPreempt   = 3 // + idle GPUs held by work of lower priority than the waiter
	levelOutranked = 4 // + every idle GPU
)

// match serves a step's waiting, each idle GPU at most one waiting GPU
// (docs/report.md, "The queue"). A pod runs on one node with room for all
// its GPUs of its type; a gang's pods all at once. The passes, each
// placing what the passes before left:
//
//  1. free GPUs, lowest-ranked waiters first (the higher can take more of
//     what follows);
//  2. free GPUs and idle GPUs held on borrowed quota (at most what each
//     ClusterQueue borrows), lowest-ranked first again;
//  3. those and idle GPUs held by work of lower priority than the waiter:
//     highest-ranked waiters first, each from the highest-ranked holders
//     below it, which fewer waiters can take;
//  4. those and idle GPUs of equal or higher priority: outranked;
//  5. what is left, on no one node: fragmented when the idle GPUs of its
//     type left in the cluster could have held it, other type when only
//     those of another type could, else shortfall.
//
// Within a pass a pod takes the node where it fits most tightly (best
// fit), free GPUs first, then borrowed quota, then lower-ranked holders,
// then the rest. A GPU free or idle for part of a step is that fraction
// of a GPU: a one-GPU pod uses it for that part of the step, and a pod of
// g GPUs fits a node of c < g GPUs for c-(g-1) of the step. For one-GPU
// pods this is a maximum matching of steps 1-3 (the waiters' reach is
// nested by rank); for larger pods it is a best-fit heuristic, as bin
// packing is.
//
// Its cost is linear in waiters, nodes and holders (times the size of the
// largest pod), so a query of 50,000 series is matched in seconds.
func match(s queueStep) queueMatch {
	x := newMatcher(&s)
	x.run()
	return x.m
}

type matcher struct {
	s     *queueStep
	m     queueMatch
	nodes []nodeSupply
	level int
	rank  float64 // pass 3: each node's below counts its groups ranked below it
	idx   fitIndex
	// Per waiter, its pod sets' pods not yet placed.
	left [][]float64
}

// nodeSupply is what a node has left to give. Its holders give in groups
// of one rank, each in proportion to its idle GPUs, so a group is drawn as
// one and its draws shared out at the end: a take costs the node's ranks,
// not its holders.
type nodeSupply struct {
	free                          float64
	quota0, quotaLeft, quotaTaken float64
	groups                        []rankGroup // highest rank first
	// alive[k] leads to the first group at k or after with idle GPUs
	// left (len(groups) for none): spent groups are skipped once.
	alive []int
	rest  float64 // idle GPUs left of all groups
	below float64 // of those, in groups ranked below matcher.rank
}

type rankGroup struct {
	rank        float64
	holders     []int
	rest0, left float64
	taken       [numQueueParts]float64
}

// next is the first group at k or after with idle GPUs left.
func (ns *nodeSupply) next(k int) int {
	r := k
	for ns.alive[r] != r {
		r = ns.alive[r]
	}
	for ns.alive[k] != r { // path compression
		ns.alive[k], k = r, ns.alive[k]
	}
	return r
}

func newMatcher(s *queueStep) *matcher {
	nw, nn, nh := len(s.waiters), len(s.nodes), len(s.idle)
	x := &matcher{s: s,
		m:     queueMatch{waiter: make([][numQueueParts]float64, nw), idle: make([][numQueueParts]float64, nh), borrowedShare: make([]float64, nh)},
		nodes: make([]nodeSupply, nn), left: make([][]float64, nw), rank: math.Inf(-1)}
	for n, nd := range s.nodes {
		x.nodes[n].free = max(0, nd.free)
	}
	// The quota pool: each ClusterQueue's idle GPUs, at most its
	// borrowing, shared by its holders in proportion to their idle GPUs.
	byCQ := map[string]float64{}
	for _, h := range s.idle {
		if h.cq != "" {
			byCQ[h.cq] += max(0, h.gpus)
		}
	}
	byNode := make([][]int, nn)
	rest := make([]float64, nh)
	for i, h := range s.idle {
		g := max(0, h.gpus)
		rest[i] = g
		if h.cq != "" && byCQ[h.cq] > 0 {
			b := min(byCQ[h.cq], max(0, s.borrowed[h.cq]))
			x.m.borrowedShare[i] = g * b / byCQ[h.cq]
			rest[i] = g - x.m.borrowedShare[i]
		}
		if h.node < 0 || h.node >= nn {
			continue // a holder on no node of the step has nothing to give
		}
		byNode[h.node] = append(byNode[h.node], i)
		x.nodes[h.node].quota0 += x.m.borrowedShare[i]
	}
	for n, hs := range byNode {
		ns := &x.nodes[n]
		ns.quotaLeft = ns.quota0
		slices.SortStableFunc(hs, func(a, b int) int { return cmp.Compare(s.idle[b].rank, s.idle[a].rank) })
		for a := 0; a < len(hs); {
			b := a + 1
			for b < len(hs) && s.idle[hs[b]].rank == s.idle[hs[a]].rank {
				b++
			}
			gr := rankGroup{rank: s.idle[hs[a]].rank, holders: hs[a:b]}
			for _, h := range hs[a:b] {
				gr.rest0 += rest[h]
			}
			gr.left = gr.rest0
			ns.rest += gr.left
			ns.groups = append(ns.groups, gr)
			a = b
		}
		ns.alive = make([]int, len(ns.groups)+1)
		for k := range ns.alive {
			ns.alive[k] = k
		}
	}
	for i, w := range s.waiters {
		x.left[i] = make([]float64, len(w.pods))
		for j, p := range w.pods {
			if p.gpus > 0 {
				x.left[i][j] = max(0, p.count)
			}
		}
	}
	x.idx = newFitIndex(nn, s.types)
	for n, nd := range s.nodes {
		x.idx.typ[n] = nd.gtype
	}
	return x
}

// capOf is what node n offers at the current level and rank.
func (x *matcher) capOf(n int) float64 {
	ns := &x.nodes[n]
	c := ns.free
	if x.level >= levelQuota {
		c += ns.quotaLeft
	}
	switch x.level {
	case levelPreempt:
		c += ns.below
	case levelOutranked:
		c += ns.rest
	}
	return c
}

func (x *matcher) setLevel(l int) {
	x.level = l
	for n := range x.s.nodes {
		x.idx.set(n, x.capOf(n))
	}
}

// byRank is the waiters' indexes by rank (ascending or not), each rank's
// typed waiters before those that take any type, larger first.
func (x *matcher) byRank(ascending bool) []int {
	ws := x.s.waiters
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		r := cmp.Compare(ws[a].rank, ws[b].rank)
		if !ascending {
			r = -r
		}
		return cmp.Or(r, cmp.Compare(boolInt(ws[a].gtype == anyType), boolInt(ws[b].gtype == anyType)), cmp.Compare(ws[b].gpus(), ws[a].gpus()))
	})
	return order
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (x *matcher) run() {
	x.setLevel(levelFree)
	up := x.byRank(true)
	for _, i := range up {
		x.place(i)
	}
	x.setLevel(levelQuota)
	for _, i := range up {
		x.place(i)
	}
	// Pass 3, highest rank first: as the rank falls, the groups at or
	// above it leave each node's reach, each once.
	type ref struct{ n, k int }
	var groups []ref
	for n := range x.nodes {
		for k := range x.nodes[n].groups {
			groups = append(groups, ref{n, k})
		}
	}
	rankOf := func(r ref) float64 { return x.nodes[r.n].groups[r.k].rank }
	slices.SortStableFunc(groups, func(a, b ref) int { return cmp.Compare(rankOf(a), rankOf(b)) })
	down := x.byRank(false)
	next := 0 // groups[:next] are below x.rank
	if len(down) > 0 {
		x.rank = x.s.waiters[down[0]].rank
		for next < len(groups) && rankOf(groups[next]) < x.rank {
			g := groups[next]
			x.nodes[g.n].below += x.nodes[g.n].groups[g.k].left
			next++
		}
	}
	x.setLevel(levelPreempt)
	for _, i := range down {
		if r := x.s.waiters[i].rank; r < x.rank {
			x.rank = r
			for next > 0 && rankOf(groups[next-1]) >= r {
				next--
				g := groups[next]
				ns := &x.nodes[g.n]
				ns.below = max(0, ns.below-ns.groups[g.k].left)
				x.idx.set(g.n, x.capOf(g.n))
			}
		}
		x.place(i)
	}
	x.setLevel(levelOutranked)
	for _, i := range up {
		x.place(i)
	}
	x.leftovers(down)
	// Share each group's and each node's quota draws out to its holders.
	for n := range x.nodes {
		ns := &x.nodes[n]
		for _, gr := range ns.groups {
			if gr.rest0 <= 0 {
				continue
			}
			for _, h := range gr.holders {
				share := ratio(max(0, x.s.idle[h].gpus)-x.m.borrowedShare[h], gr.rest0)
				for p, v := range gr.taken {
					x.m.idle[h][p] += v * share
				}
			}
		}
		if ns.quota0 > 0 {
			for _, gr := range ns.groups {
				for _, h := range gr.holders {
					x.m.idle[h][partQuota] += ns.quotaTaken * x.m.borrowedShare[h] / ns.quota0
				}
			}
		}
	}
}

// place puts what it can of waiter i on nodes at the current level.
func (x *matcher) place(i int) {
	w := x.s.waiters[i]
	if w.gang {
		x.placeGang(i)
		return
	}
	for j, p := range w.pods {
		g := fitSize(p.gpus)
		for x.left[i][j] > capEps {
			n := x.idx.find(w.gtype, g)
			if n < 0 {
				break
			}
			t := min(x.left[i][j], fits(x.idx.cap[n], g))
			if t <= capEps {
				break
			}
			x.take(n, t*p.gpus, i)
			x.left[i][j] -= t
		}
	}
}

// placeGang places all of gang i's pods, or none: each pod on a node with
// room for all its GPUs.
func (x *matcher) placeGang(i int) {
	w := x.s.waiters[i]
	need, room := 0.0, 0.0
	for j, p := range w.pods {
		need += fitSize(p.gpus) * math.Ceil(x.left[i][j]-capEps)
	}
	if need <= 0 {
		return
	}
	for n := range x.s.nodes {
		if w.gtype == anyType || x.idx.typ[n] == w.gtype {
			room += x.idx.cap[n]
		}
	}
	if room+capEps < need {
		return // and the loop below stays bounded by the room there is
	}
	type pick struct {
		n    int
		gpus float64
	}
	var plan []pick
	was := map[int]float64{}
	ok := true
	order := make([]int, len(w.pods))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w.pods[b].gpus, w.pods[a].gpus) })
	for _, j := range order {
		p := w.pods[j]
		g := fitSize(p.gpus)
		for k := 0; ok && float64(k) < x.left[i][j]-capEps; k++ {
			n := x.idx.findFull(w.gtype, g)
			if n < 0 {
				ok = false
				break
			}
			if _, seen := was[n]; !seen {
				was[n] = x.idx.cap[n]
			}
			x.idx.set(n, x.idx.cap[n]-g)
			plan = append(plan, pick{n, p.gpus})
		}
	}
	for n, c := range was {
		x.idx.set(n, c)
	}
	if !ok {
		return
	}
	for _, p := range plan {
		x.take(p.n, p.gpus, i)
	}
	for j := range x.left[i] {
		x.left[i][j] = 0
	}
}

// take gives waiter i g GPUs of node n at the current level: free ones,
// then those on borrowed quota, then those of holders ranked below the
// waiter (highest first), then, at level 4, those of the rest (highest
// first again).
func (x *matcher) take(n int, g float64, i int) {
	ns := &x.nodes[n]
	parts := &x.m.waiter[i]
	t := min(g, ns.free)
	ns.free -= t
	if x.s.waiters[i].kueue {
		parts[partHeldBack] += t
	} else {
		parts[partFree] += t
	}
	g -= t
	if x.level >= levelQuota && g > capEps && ns.quotaLeft > capEps {
		t := min(g, ns.quotaLeft)
		ns.quotaLeft -= t
		ns.quotaTaken += t
		parts[partQuota] += t
		g -= t
	}
	if x.level >= levelPreempt && g > capEps && ns.rest > capEps {
		rank := x.s.waiters[i].rank
		// The first group ranked below the waiter.
		start, _ := slices.BinarySearchFunc(ns.groups, rank, func(gr rankGroup, r float64) int { return cmp.Compare(r, gr.rank) })
		for start < len(ns.groups) && ns.groups[start].rank >= rank {
			start++
		}
		draw := func(from, to, part int) {
			for k := ns.next(from); k < to && g > capEps; k = ns.next(k) {
				gr := &ns.groups[k]
				t := min(g, gr.left)
				gr.left -= t
				gr.taken[part] += t
				ns.rest = max(0, ns.rest-t)
				if gr.rank < x.rank {
					ns.below = max(0, ns.below-t)
				}
				parts[part] += t
				g -= t
				if gr.left <= capEps {
					ns.alive[k] = k + 1
				}
			}
		}
		draw(start, len(ns.groups), partPreemption)
		if x.level >= levelOutranked {
			draw(0, start, partOutranked)
		}
	}
	x.idx.set(n, x.capOf(n))
}

// leftovers splits what no node could hold: fragmented when the idle and
// free GPUs of the waiter's type left in the cluster could have held it,
// other type when only those of other types could, else shortfall.
// Typed waiters go first, their own type before others', so that a
// waiter that takes any type takes what the typed ones left.
func (x *matcher) leftovers(order []int) {
	left := make([]float64, x.s.types)
	var total float64
	for n, nd := range x.s.nodes {
		if nd.gtype >= 0 && nd.gtype < x.s.types {
			ns := &x.nodes[n]
			v := ns.free + ns.quotaLeft + ns.rest
			left[nd.gtype] += v
			total += v
		}
	}
	// Types by what they have left, most first; drawn in that order, a
	// spent type skipped for good.
	types := make([]int, len(left))
	for t := range types {
		types[t] = t
	}
	slices.SortStableFunc(types, func(a, b int) int { return cmp.Compare(left[b], left[a]) })
	first := 0
	draw := func(g float64, own, except int) {
		if own >= 0 {
			d := min(g, left[own])
			left[own] -= d
			total -= d
			return
		}
		for k := first; k < len(types) && g > capEps; k++ {
			t := types[k]
			if t == except {
				continue
			}
			d := min(g, left[t])
			left[t] -= d
			total -= d
			g -= d
		}
		for first < len(types) && left[types[first]] <= capEps {
			first++
		}
	}
	// serve gives waiter i's rest to part from GPUs that number have,
	// drawn as draw(own, except) says.
	serve := func(i, part int, have float64, own, except int) {
		w := x.s.waiters[i]
		parts := &x.m.waiter[i]
		if w.gang {
			var r float64
			for j, p := range w.pods {
				r += x.left[i][j] * p.gpus
			}
			if r > capEps && have >= r-capEps {
				parts[part] += r
				draw(r, own, except)
				for j := range x.left[i] {
					x.left[i][j] = 0
				}
			}
			return
		}
		for j, p := range w.pods {
			u := x.left[i][j]
			if u <= capEps {
				continue
			}
			t := min(u, fits(have, fitSize(p.gpus)))
			if t > capEps {
				parts[part] += t * p.gpus
				draw(t*fitSize(p.gpus), own, except)
				have = max(0, have-t*fitSize(p.gpus))
				x.left[i][j] -= t
			}
		}
	}
	typed := func(i int) bool { return x.s.waiters[i].gtype != anyType }
	for _, i := range order {
		if t := x.s.waiters[i].gtype; typed(i) && t < x.s.types {
			serve(i, partFragmented, left[t], t, -1)
		}
	}
	for _, i := range order {
		if t := x.s.waiters[i].gtype; typed(i) {
			other := total
			if t < x.s.types {
				other -= left[t]
			}
			serve(i, partOtherType, other, -1, t)
		}
	}
	for _, i := range order {
		if !typed(i) {
			serve(i, partFragmented, total, -1, -1)
		}
	}
	for i := range x.s.waiters {
		for j, p := range x.s.waiters[i].pods {
			if u := x.left[i][j]; u > capEps {
				x.m.waiter[i][partShortfall] += u * p.gpus
			}
			x.left[i][j] = 0
		}
	}
}

// fitSize is the GPUs a pod needs on one node: whole GPUs, as the
// scheduler counts them; a share of one GPU (a mean) fits as one.
func fitSize(g float64) float64 {
	if g <= 1 {
		return 1
	}
	return math.Ceil(g - capEps)
}

// fits is how many pods of g GPUs c GPUs hold: whole pods, and a last one
// for the part of the step the node had its last GPU (c-(g-1) of it).
func fits(c, g float64) float64 {
	if c <= capEps {
		return 0
	}
	k := math.Floor((c + capEps) / g)
	rem := max(0, c-k*g)
	return k + min(1, max(0, rem-(g-1)))
}

// fitBuckets is the largest GPU count fitIndex tells apart; nodes with
// more are in its last bucket and scanned.
const fitBuckets = 16

// fitIndex finds, among nodes of a GPU type, one whose capacity holds a
// pod: nodes by type and whole GPUs of capacity, and apart those with a
// fraction of a GPU over it, so that a lookup costs the buckets it scans,
// not the nodes. Slot types holds every node, for waiters of any type.
type fitIndex struct {
	types int
	cap   []float64
	typ   []int
	// full holds nodes with capacity above 0 by floor(capacity); frac
	// those whose capacity is not a whole number, by the same floor;
	// each [slot*(fitBuckets+1)+bucket].
	full, frac [][]int
	// Each node's bucket and position in full and frac, of its type's
	// slot and of the all-types one; -1 if none.
	at [4][]int
}

func newFitIndex(nodes, types int) fitIndex {
	x := fitIndex{types: types, cap: make([]float64, nodes), typ: make([]int, nodes),
		full: make([][]int, (types+1)*(fitBuckets+1)), frac: make([][]int, (types+1)*(fitBuckets+1))}
	for k := range x.at {
		x.at[k] = make([]int, 2*nodes)
		for n := range x.at[k] {
			x.at[k][n] = -1
		}
	}
	return x
}

func bucketOf(c float64) (b int, frac bool) {
	f := math.Floor(c + capEps)
	return int(min(fitBuckets, max(0, f))), c-f > capEps
}

// set records node n's capacity.
func (x *fitIndex) set(n int, c float64) {
	x.cap[n] = c
	t := x.typ[n]
	if t < 0 || t >= x.types {
		return
	}
	b, fr := bucketOf(c)
	nn := len(x.cap)
	for k, slot := range []int{t, x.types} {
		s := slot*(fitBuckets+1) + b
		move(x.full, x.at[0], x.at[1], k*nn+n, n, s, c > capEps)
		move(x.frac, x.at[2], x.at[3], k*nn+n, n, s, c > capEps && fr)
	}
}

// move puts node n (entry e of the bucket and position tables) in bucket
// slot of bs, or out of bs.
func move(bs [][]int, bucket, pos []int, e, n, slot int, in bool) {
	if bucket[e] == slot && in {
		return
	}
	if b := bucket[e]; b >= 0 {
		s := bs[b]
		last := s[len(s)-1]
		s[pos[e]] = last
		// The moved node's entry: the one of this slot set in its tables.
		le := e - n + last
		pos[le] = pos[e]
		bs[b] = s[:len(s)-1]
		bucket[e], pos[e] = -1, -1
	}
	if in {
		bucket[e], pos[e] = slot, len(bs[slot])
		bs[slot] = append(bs[slot], n)
	}
}

// slotOf is the slot a waiter of type t looks in.
func (x *fitIndex) slotOf(t int) int {
	if t == anyType {
		return x.types
	}
	return t
}

// find is a node of type t (any type for anyType) that holds a pod of g
// GPUs, the tightest such; else one that holds it for part of the step;
// else -1.
func (x *fitIndex) find(t int, g float64) int {
	if n := x.findFull(t, g); n >= 0 {
		return n
	}
	if t != anyType && (t < 0 || t >= x.types) {
		return -1
	}
	slot := x.slotOf(t)
	b := int(g) - 1
	if b < fitBuckets {
		if s := x.frac[slot*(fitBuckets+1)+b]; len(s) > 0 {
			return s[len(s)-1]
		}
		return -1
	}
	for _, n := range x.full[slot*(fitBuckets+1)+fitBuckets] {
		if c := x.cap[n]; c > g-1+capEps && c < g {
			return n
		}
	}
	return -1
}

// findFull is the node of type t (any type for anyType) with the least
// room that holds a whole pod of g GPUs, or -1.
func (x *fitIndex) findFull(t int, g float64) int {
	if t != anyType && (t < 0 || t >= x.types) {
		return -1
	}
	slot := x.slotOf(t)
	for b := max(1, int(math.Ceil(g-capEps))); b <= fitBuckets; b++ {
		s := x.full[slot*(fitBuckets+1)+b]
		if len(s) == 0 {
			continue
		}
		if b < fitBuckets {
			return s[len(s)-1]
		}
		for _, n := range s {
			if x.cap[n] >= g-capEps {
				return n
			}
		}
	}
	return -1
}
