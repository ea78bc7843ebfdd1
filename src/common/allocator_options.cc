// The memory allocator's options for the binaries that plan (they link
// jemalloc: //src/common:allocator_options). One arena for every thread:
// the planner simulates plans on threads it starts for each batch of them
// (estimate_many.h, search_space.h), and with jemalloc's default of four
// arenas a core each new thread took another arena, so the memory one
// thread freed was not what the next allocated from, and it faulted fresh
// pages in (inception_v3 on HAP's 64 devices: about a tenth of
// planning's wall time; docs/BENCHMARKS.md). And no time-based purging of
// freed pages: a simulation of a large program frees hundreds of MiB that
// the next one allocates again, and purged over jemalloc's 10 s decay they
// were faulted in afresh (gpt2_xl as micro-batches on 46 devices: a third
// of planning's wall time in page faults); Plan hands them back when it
// ends (release_memory.h). MALLOC_CONF in the environment still applies on
// top.
extern "C" {
// Read by jemalloc at its start (the symbol its manual names).
extern const char* malloc_conf;
const char* malloc_conf = "narenas:1,dirty_decay_ms:-1";
}
