// Command vpa-bench feeds workload W1 (docs/design/bench-workload.md) through upstream VPA's recommender
// model (k8s.io/autoscaler/vertical-pod-autoscaler, the version hack/go/versions.env pins) exactly as Tailor's
// `recommender/engine/examples/w1_figures.rs` feeds Tailor's engine: same containers, samples and order, same
// phases, and the same checksums of the recommendations, so that hack/bench-vs-upstream.sh can put the two
// side by side.
//
// Usage: vpa-bench [-quality=true|false] [containers] [days]   (default 10000 7)
//
// Phases (each timed by this process's CPU clock; the main goroutine is locked to its OS thread and the thread
// clock is printed too, the difference being the Go runtime's own threads, mostly garbage collection):
//
//   - aggregate: ContainerState.AddSample on a ContainerState whose aggregator is its own
//     AggregateContainerState (no VPA, so no quality metrics).
//   - estimate: GetRecommendedPodResources({"c": aggregate}) for every aggregate.
//   - updatevpas: per container, what UpdateVPAs does for a VPA holding that one aggregate (without the API
//     write): merge into a fresh AggregateContainerState, GetRecommendedPodResources,
//     MapToListOfRecommendedContainerResources, the capping post-processor, Vpa.UpdateRecommendation.
//   - cluster: ClusterState.AddSample (the recommender's entry point) for pod i in namespace ns-(i/100) with labels
//     {app: app-i}, one container c, one VPA per namespace selecting everything. With -quality=true (upstream as it
//     runs) the VPAs exist before the fold, so every sample also goes through observeQualityMetrics (a Prometheus
//     histogram observation per sample); with -quality=false they are added after the fold, so the aggregates are
//     not under a VPA while samples arrive and observeQualityMetrics returns at its first check.
//   - cluster recommend: processVPAUpdate for every VPA without the API write.
//
// Output: human-readable lines and, for hack/bench-vs-upstream.sh, `key=value` lines.
package main

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	recommender_config "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/routines"
)

const (
	t0           = 1_717_200_000
	ticksPerDay  = 1440
	clockProcess = 2 // CLOCK_PROCESS_CPUTIME_ID
	clockThread  = 3 // CLOCK_THREAD_CPUTIME_ID
)

func init() { runtime.LockOSThread() }

func clockNs(id uintptr) int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}

// cpuClock reads the process and thread CPU clocks.
type cpuClock struct{ proc, thread int64 }

func now() cpuClock { return cpuClock{clockNs(clockProcess), clockNs(clockThread)} }

// since returns process and thread CPU seconds since c.
func (c cpuClock) since() (float64, float64) {
	n := now()
	return float64(n.proc-c.proc) / 1e9, float64(n.thread-c.thread) / 1e9
}

// w1 is the workload generator of docs/design/bench-workload.md.
type w1 struct {
	noise            []float64
	baseCPU, baseMem [160]float64
}

func newW1() *w1 {
	w := &w1{noise: make([]float64, 65536)}
	var state uint64 = 42
	for i := range w.noise {
		state += 0x9E3779B97F4A7C15
		z := state
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		w.noise[i] = float64(z>>11) * math.Pow(2, -53)
	}
	for i := 0; i < 160; i++ {
		w.baseCPU[i] = 0.01 * math.Pow(1.05, float64(i))
		w.baseMem[i] = 10 * 1048576 * math.Pow(1.05, float64(i))
	}
	return w
}

func tickTime(k int) time.Time { return time.Unix(t0+60*int64(k), 0) }

func diurnal(k int) float64 { return 1 + 0.5*math.Sin(2*math.Pi*float64(k)/1440) }

func (w *w1) cpu(i, k int, d float64) float64 {
	return w.baseCPU[i%160] * d * (0.8 + 0.4*w.noise[(i*7919+k)%65536])
}

func (w *w1) mem(i, k int) float64 {
	return w.baseMem[i%160] * (0.9 + 0.2*w.noise[(i*104729+3*k+1)%65536])
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// checksum is FNV-1a 64 over one text line per container recommendation (w1_figures computes the same).
type checksum struct {
	h interface{ Write([]byte) (int, error) }
}

func (c checksum) add(index int, r *vpa_types.RecommendedContainerResources) {
	q := func(l corev1.ResourceList, n corev1.ResourceName) int64 {
		v, ok := l[n]
		if !ok {
			return -1
		}
		if n == corev1.ResourceCPU {
			return v.MilliValue()
		}
		return v.Value()
	}
	line := fmt.Sprintf("%d %s %d %d %d %d %d %d\n", index, r.ContainerName,
		q(r.Target, corev1.ResourceCPU), q(r.Target, corev1.ResourceMemory),
		q(r.LowerBound, corev1.ResourceCPU), q(r.LowerBound, corev1.ResourceMemory),
		q(r.UpperBound, corev1.ResourceCPU), q(r.UpperBound, corev1.ResourceMemory))
	_, _ = c.h.Write([]byte(line))
}

func main() {
	quality := flag.Bool("quality", true, "VPAs exist during the cluster fold, so every sample also feeds the quality metrics")
	flag.Parse()
	n, days := 10000, 7
	if a := flag.Arg(0); a != "" {
		n, _ = strconv.Atoi(a)
	}
	if a := flag.Arg(1); a != "" {
		days, _ = strconv.Atoi(a)
	}
	ticks := days * ticksPerDay
	samples := float64(2 * n * ticks)
	w := newW1()
	fmt.Printf("upstream W1: %d containers x %d days (%.1f M samples), quality metrics %v, GOMAXPROCS=%d, %s\n",
		n, days, samples/1e6, *quality, runtime.GOMAXPROCS(0), runtime.Version())
	kv := func(k string, v any) { fmt.Printf("%s=%v\n", k, v) }

	// --- aggregate path ----------------------------------------------------------------------------------------
	request := model.Resources{model.ResourceCPU: model.CPUAmountFromCores(0.1), model.ResourceMemory: model.MemoryAmountFromBytes(100 * 1048576)}
	base := heap()
	containers := make([]*model.ContainerState, n)
	aggs := make([]*model.AggregateContainerState, n)
	for i := range containers {
		aggs[i] = model.NewAggregateContainerState()
		containers[i] = model.NewContainerState(request, aggs[i])
	}
	sample := model.ContainerUsageSample{}
	clock := now()
	for k := 0; k < ticks; k++ {
		t, d := tickTime(k), diurnal(k)
		for i, c := range containers {
			sample = model.ContainerUsageSample{MeasureStart: t, Usage: model.CPUAmountFromCores(w.cpu(i, k, d)), Resource: model.ResourceCPU}
			c.AddSample(&sample)
			sample = model.ContainerUsageSample{MeasureStart: t, Usage: model.MemoryAmountFromBytes(w.mem(i, k)), Resource: model.ResourceMemory}
			c.AddSample(&sample)
		}
	}
	proc, thread := clock.since()
	h := heap() - base
	fmt.Printf("aggregate path: %.2f s CPU (%.2f s on this thread), %.2f M samples/s, %.1f ns/sample; heap %.1f B/container\n",
		proc, thread, samples/proc/1e6, proc*1e9/samples, float64(h)/float64(n))
	kv("aggregate_cpu_s", proc)
	kv("aggregate_thread_cpu_s", thread)
	kv("aggregate_msamples_per_s", samples/proc/1e6)
	kv("aggregate_heap_b_per_container", float64(h)/float64(n))

	// --- recommendations for every aggregate -------------------------------------------------------------------
	cfg := defaults()
	rec := logic.CreatePodResourceRecommender(cfg.recommendation)
	sum := checksum{fnv.New64a()}
	clock = now()
	for _, a := range aggs {
		r := rec.GetRecommendedPodResources(model.ContainerNameToAggregateStateMap{"c": a})
		runtime.KeepAlive(r)
	}
	est, _ := clock.since()
	vpas := make([]*model.Vpa, n)
	for i := range vpas {
		vpas[i] = model.NewVpa(model.VpaID{Namespace: "ns", VpaName: "vpa-" + strconv.Itoa(i)}, labels.Everything(), time.Unix(t0, 0))
	}
	observed := &vpa_types.VerticalPodAutoscaler{}
	capping := routines.NewCappingRecommendationProcessor(corev1.ResourceList{})
	recs := make([]*vpa_types.RecommendedPodResources, n)
	clock = now()
	for i, a := range aggs {
		fresh := model.NewAggregateContainerState()
		fresh.MergeContainerState(a)
		r := rec.GetRecommendedPodResources(model.ContainerNameToAggregateStateMap{"c": fresh})
		list := logic.MapToListOfRecommendedContainerResources(r, cfg.format)
		list = capping.Process(observed, list)
		vpas[i].UpdateRecommendation(list)
		recs[i] = list
	}
	upd, _ := clock.since()
	for i, r := range recs {
		for j := range r.ContainerRecommendations {
			sum.add(i, &r.ContainerRecommendations[j])
		}
	}
	fmt.Printf("recommend %d: estimate %.1f ms (%.2f us/container); UpdateVPAs-equivalent %.1f ms (%.2f us/container)\n",
		n, est*1e3, est*1e6/float64(n), upd*1e3, upd*1e6/float64(n))
	kv("estimate_us_per_container", est*1e6/float64(n))
	kv("updatevpas_us_per_container", upd*1e6/float64(n))
	kv("checksum_updatevpas", fmt.Sprintf("%016x", sum.h.(interface{ Sum64() uint64 }).Sum64()))
	containers, aggs, vpas, recs = nil, nil, nil, nil

	// --- cluster path ------------------------------------------------------------------------------------------
	ids := make([]model.ContainerID, n)
	podLabels := make([]labels.Set, n)
	for i := range ids {
		ids[i] = model.ContainerID{PodID: model.PodID{Namespace: "ns-" + strconv.Itoa(i/100), PodName: "pod-" + strconv.Itoa(i)}, ContainerName: "c"}
		podLabels[i] = labels.Set{"app": "app-" + strconv.Itoa(i)}
	}
	namespaces := (n + 99) / 100
	vpaObjects := make([]*vpa_types.VerticalPodAutoscaler, namespaces)
	for ns := range vpaObjects {
		vpaObjects[ns] = &vpa_types.VerticalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-" + strconv.Itoa(ns), Name: "vpa"}}
	}
	addVpas := func(cluster model.ClusterState) {
		for _, v := range vpaObjects {
			if err := cluster.AddOrUpdateVpa(v, labels.Everything()); err != nil {
				panic(err)
			}
		}
	}
	base = heap()
	cluster := model.NewClusterState(time.Hour)
	if *quality {
		addVpas(cluster)
	}
	for i, id := range ids {
		cluster.AddOrUpdatePod(id.PodID, podLabels[i], corev1.PodRunning)
		if err := cluster.AddOrUpdateContainer(id, request); err != nil {
			panic(err)
		}
	}
	keyed := model.ContainerUsageSampleWithKey{}
	clock = now()
	for k := 0; k < ticks; k++ {
		t, d := tickTime(k), diurnal(k)
		for i := range ids {
			keyed = model.ContainerUsageSampleWithKey{
				ContainerUsageSample: model.ContainerUsageSample{MeasureStart: t, Usage: model.CPUAmountFromCores(w.cpu(i, k, d)), Resource: model.ResourceCPU},
				Container:            ids[i],
			}
			_ = cluster.AddSample(&keyed)
			keyed = model.ContainerUsageSampleWithKey{
				ContainerUsageSample: model.ContainerUsageSample{MeasureStart: t, Usage: model.MemoryAmountFromBytes(w.mem(i, k)), Resource: model.ResourceMemory},
				Container:            ids[i],
			}
			_ = cluster.AddSample(&keyed)
		}
	}
	proc, thread = clock.since()
	if !*quality {
		addVpas(cluster)
	}
	h = heap() - base
	fmt.Printf("cluster path: %.2f s CPU (%.2f s on this thread), %.2f M samples/s, %.1f ns/sample; heap %.1f B/container\n",
		proc, thread, samples/proc/1e6, proc*1e9/samples, float64(h)/float64(n))
	kv("cluster_cpu_s", proc)
	kv("cluster_thread_cpu_s", thread)
	kv("cluster_msamples_per_s", samples/proc/1e6)
	kv("cluster_heap_b_per_container", float64(h)/float64(n))

	// --- cluster recommend pass: processVPAUpdate without the status write -------------------------------------
	all := cluster.VPAs()
	order := make([]model.VpaID, 0, len(all))
	for id := range all {
		order = append(order, id)
	}
	nsIndex := func(id model.VpaID) int { v, _ := strconv.Atoi(id.Namespace[3:]); return v }
	sort.Slice(order, func(a, b int) bool { return nsIndex(order[a]) < nsIndex(order[b]) })
	sum = checksum{fnv.New64a()}
	count := 0
	clusterRecs := make([]*vpa_types.RecommendedPodResources, len(order))
	clock = now()
	for j, id := range order {
		vpa := all[id]
		r := rec.GetRecommendedPodResources(routines.GetContainerNameToAggregateStateMap(vpa))
		list := logic.MapToListOfRecommendedContainerResources(r, cfg.format)
		list = capping.Process(vpaObjects[nsIndex(id)], list)
		vpa.UpdateRecommendation(list)
		vpa.UpdateConditions(vpa.PodCount > 0)
		_ = cluster.RecordRecommendation(vpa, time.Unix(t0, 0))
		clusterRecs[j] = list
		count += len(list.ContainerRecommendations)
	}
	all2, _ := clock.since()
	for j, r := range clusterRecs {
		for i := range r.ContainerRecommendations {
			sum.add(j, &r.ContainerRecommendations[i])
		}
	}
	fmt.Printf("cluster recommend pass (%d VPAs, %d container names): %.1f ms (%.2f us/container)\n",
		len(order), count, all2*1e3, all2*1e6/float64(n))
	kv("cluster_recommend_us_per_container", all2*1e6/float64(n))
	kv("checksum_cluster", fmt.Sprintf("%016x", sum.h.(interface{ Sum64() uint64 }).Sum64()))
}

type settings struct {
	recommendation logic.RecommendationConfig
	format         logic.RecommendationFormat
}

// defaults is upstream's default recommender configuration, taken from config.DefaultRecommenderConfig as
// routines.NewRecommenderController does.
func defaults() settings {
	c := recommender_config.DefaultRecommenderConfig()
	return settings{
		recommendation: logic.RecommendationConfig{
			SafetyMarginFraction:       c.SafetyMarginFraction,
			PodMinCPUMillicores:        c.PodMinCPUMillicores,
			PodMinMemoryMb:             c.PodMinMemoryMb,
			TargetCPUPercentile:        c.TargetCPUPercentile,
			LowerBoundCPUPercentile:    c.LowerBoundCPUPercentile,
			UpperBoundCPUPercentile:    c.UpperBoundCPUPercentile,
			ConfidenceIntervalCPU:      c.ConfidenceIntervalCPU,
			TargetMemoryPercentile:     c.TargetMemoryPercentile,
			LowerBoundMemoryPercentile: c.LowerBoundMemoryPercentile,
			UpperBoundMemoryPercentile: c.UpperBoundMemoryPercentile,
			ConfidenceIntervalMemory:   c.ConfidenceIntervalMemory,
		},
		format: logic.RecommendationFormat{
			HumanizeMemory:     c.HumanizeMemory,
			RoundCPUMillicores: c.RoundCPUMillicores,
			RoundMemoryBytes:   c.RoundMemoryBytes,
		},
	}
}
