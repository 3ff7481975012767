/*
dev/cuda_cpu/nccl.h: NCCL on the CPU runtime for CUDA, for the tests only.

train_gpt2.cu's data parallelism (its section 6) calls NCCL. Built against dev/cuda_cpu/ (make
train_gpt2cu_cpu), it finds this header instead of the real one, and N processes of the CPU runtime on one
machine form one communicator: real processes, real shared memory, NCCL's semantics. The binaries a user
builds never see this file; doc/cuda.md ("Several GPUs") describes it.

What the trainer may rely on is NCCL's own behaviour, for the calls it makes:
  - ncclGetVersion, ncclGetUniqueId, ncclCommInitRankConfig (ncclCommInitRank), ncclCommGetAsyncError,
    ncclCommFinalize, ncclCommDestroy, ncclCommAbort, ncclGetErrorString, ncclGetLastError;
  - ncclAllReduce, ncclReduceScatter, ncclAllGather on int8/uint8, int32/uint32, int64/uint64, float32 and
    float64, with sum, prod, max, min and avg (the sum divided by the number of ranks). In-place forms as
    NCCL defines them (recvbuff == sendbuff for the all-reduce; recvbuff == sendbuff + rank * count for the
    reduce-scatter, sendbuff == recvbuff + rank * count for the all-gather). Buffers must be device memory
    (cudaMalloc) of the size the call implies, else ncclInvalidArgument.
  - a reduction adds the ranks' values in rank order (rank 0's first), so every rank gets the same bits,
    and the same inputs give the same result in every run;
  - a non-blocking communicator (config.blocking = 0): the init and each collective return ncclInProgress
    until they are done, ncclCommGetAsyncError moves them on and reports ncclInProgress, ncclSuccess or an
    error, and no other call may start meanwhile (ncclInvalidUsage). A blocking one (the default) waits
    inside the call. A collective is done when its result is in recvbuff: cudaStreamQuery then says the
    stream is idle, as the runtime's every stream always is.
What it checks beyond NCCL (which would hang, or corrupt, instead):
  - every rank's call is compared with every other's: which collective, count, type, operation, and its
    number since the init. A rank that calls another collective, or one more or one fewer, fails every
    rank's call with a message naming both calls (ncclInvalidUsage; ncclGetLastError gives it);
  - a rank whose process has ended (killed, or exited without ncclCommDestroy), that called
    ncclCommAbort, or that left with ncclCommDestroy while another waits for it, fails the others' pending
    call within about 20 ms (ncclRemoteError; ncclInvalidUsage for one that left). Real NCCL notices a dead
    peer only where a connection closes, and may hang: train_gpt2.cu's --nccl-timeout covers that on a GPU,
    and here a rank that never arrives.
How: ncclGetUniqueId names a file in /dev/shm ($TMPDIR, else /tmp, where there is none). Rank 0's init
creates it with the world size; each rank maps it and claims its slot with its pid; once all have joined,
the name is removed (the mappings stay). A collective moves in pieces of at most 1 MiB per rank: each rank
copies its piece into its slot and raises its count of pieces posted, waits until every rank has posted,
compares the calls, reads every slot, writes its result and raises its count of pieces read. A slot is
refilled only once every rank has read it.
*/
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

// The types and codes of nccl.h 2.28, value for value.
typedef struct ncclComm* ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
    ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8,
    ncclDouble = 8, ncclBfloat16 = 9
} ncclDataType_t;
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
// the fields the trainer sets; the rest of NCCL's config is about transports this runtime does not have
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT}

namespace nccl_cpu {

static const int MAX_RANKS = 64;
static const size_t PIECE = 1 << 20;        // bytes a rank posts at a time
static const uint32_t MAGIC = 0x4e43434c;   // "NCCL": rank 0 has set the segment up
enum Kind { ALL_REDUCE = 1, REDUCE_SCATTER, ALL_GATHER };
static const char* const kind_names[] = {"", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather"};
enum Status { MEMBER = 0, LEFT = 1, ABORTED = 2 };

// One rank's part of the shared segment. Its counters sit on their own cache lines; the call and the
// data of the piece posted last follow.
struct Slot {
    alignas(64) std::atomic<int> pid;        // 0 until the rank joins
    std::atomic<int> status;                 // Status
    alignas(64) std::atomic<uint64_t> posted;   // pieces this rank has put in data
    alignas(64) std::atomic<uint64_t> read;     // pieces this rank has read from every slot
    alignas(64) int kind, type, op;
    uint64_t count, call;                    // the call's count (as passed) and number since the init
    alignas(64) char data[PIECE];
};
struct Segment {
    std::atomic<uint32_t> magic;
    int nranks;
    std::atomic<int> joined;
    alignas(64) Slot slot[1];                // nranks of them
};
static size_t segment_bytes(int nranks) { return sizeof(Segment) + (size_t)(nranks - 1) * sizeof(Slot); }

}  // namespace nccl_cpu

struct ncclComm {
    char path[NCCL_UNIQUE_ID_BYTES];
    int rank, nranks, blocking;
    nccl_cpu::Segment* seg;                  // NULL until mapped
    int joined;                              // the init has completed
    ncclResult_t state;                      // ncclSuccess, ncclInProgress, or the error that ended it
    // the collective in progress
    int kind, type, op;
    const char* send;
    char* recv;
    size_t count, esize, per_piece, piece, pieces;
    int posted;                              // this piece is in our slot
    uint64_t seq, calls;                     // pieces moved and collectives called since the init
    double next_check;                       // when to look at the other ranks' processes next (ms)
    char error[512];
};

namespace nccl_cpu {

static char last_error[512];                 // ncclGetLastError(NULL): the last failed init or call

static double clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static ncclResult_t fail(ncclComm* c, ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    if (c) {
        snprintf(c->error, sizeof(c->error), "%s", last_error);
        c->state = r;
    }
    return r;
}

static size_t type_size(int t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

// A process that has ended: gone, or a zombie its parent has not reaped yet
static int process_ended(int pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* p = strrchr(buf, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}

// While waiting for the other ranks: ncclInProgress, or the error a rank that cannot come any more causes
// (looked at every 20 ms; a rank that has not joined yet is not waited for here)
static ncclResult_t waiting(ncclComm* c) {
    double now = clock_ms();
    if (now < c->next_check) return ncclInProgress;
    c->next_check = now + 20;
    for (int r = 0; r < c->nranks; r++) {
        Slot* s = &c->seg->slot[r];
        int pid = s->pid.load();
        if (r == c->rank || !pid) continue;
        int st = s->status.load();
        if (st == ABORTED) return fail(c, ncclRemoteError, "rank %d aborted its communicator", r);
        if (st == LEFT)
            return fail(c, ncclInvalidUsage, "rank %d left the communicator (ncclCommDestroy) while rank %d waits "
                        "in its call #%llu: the ranks called different numbers of collectives", r, c->rank,
                        (unsigned long long)c->calls);
        if (process_ended(pid)) return fail(c, ncclRemoteError, "rank %d (pid %d) exited", r, pid);
    }
    return ncclInProgress;
}

static ncclResult_t join(ncclComm* c) {
    if (!c->seg) {
        size_t bytes = segment_bytes(c->nranks);
        int fd = c->rank == 0 ? open(c->path, O_RDWR | O_CREAT | O_EXCL, 0600) : open(c->path, O_RDWR);
        if (fd < 0 && c->rank != 0 && errno == ENOENT) return ncclInProgress;      // rank 0 is not there yet
        if (fd < 0) return fail(c, ncclSystemError, "cannot open %s (%s)", c->path, strerror(errno));
        struct stat st;
        if (c->rank == 0 && ftruncate(fd, (off_t)bytes) != 0) {
            close(fd);
            return fail(c, ncclSystemError, "cannot size %s (%s)", c->path, strerror(errno));
        }
        if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Segment)) {       // rank 0 is sizing it
            close(fd);
            return ncclInProgress;
        }
        void* m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return fail(c, ncclSystemError, "cannot map %s (%s)", c->path, strerror(errno));
        Segment* seg = (Segment*)m;
        if (c->rank == 0) {
            seg->nranks = c->nranks;
            seg->magic.store(MAGIC);
        } else if (seg->magic.load() != MAGIC) {
            munmap(m, (size_t)st.st_size);
            return ncclInProgress;
        } else if (seg->nranks != c->nranks) {
            int n = seg->nranks;
            munmap(m, (size_t)st.st_size);
            return fail(c, ncclInvalidArgument, "rank %d was given %d ranks, rank 0 %d", c->rank, c->nranks, n);
        }
        int none = 0;
        if (!seg->slot[c->rank].pid.compare_exchange_strong(none, (int)getpid())) {
            munmap(m, bytes);
            return fail(c, ncclInvalidUsage, "rank %d joined twice (pids %d and %d)", c->rank, none, (int)getpid());
        }
        c->seg = seg;
        seg->joined.fetch_add(1);
    }
    if (c->seg->joined.load() < c->nranks) return waiting(c);
    unlink(c->path);                         // every rank has mapped it: the name is no longer needed
    c->joined = 1;
    return c->state = ncclSuccess;
}

// Element i of a piece of type t: what a reduction reads and writes
template <typename T> static void reduce_into(char* out, const Slot* slots, size_t at, size_t n, int nranks, int op) {
    for (size_t i = 0; i < n; i++) {
        T acc;
        memcpy(&acc, slots[0].data + at + i * sizeof(T), sizeof(T));
        for (int r = 1; r < nranks; r++) {
            T x;
            memcpy(&x, slots[r].data + at + i * sizeof(T), sizeof(T));
            acc = op == ncclProd ? acc * x : op == ncclMax ? (x > acc ? x : acc) : op == ncclMin ? (x < acc ? x : acc)
                                                                                   : acc + x;
        }
        if (op == ncclAvg) acc = (T)(acc / (T)nranks);
        memcpy(out + i * sizeof(T), &acc, sizeof(T));
    }
}

static void reduce(char* out, const Slot* slots, size_t at, size_t n, int nranks, int type, int op) {
    switch (type) {
    case ncclInt8: reduce_into<int8_t>(out, slots, at, n, nranks, op); break;
    case ncclUint8: reduce_into<uint8_t>(out, slots, at, n, nranks, op); break;
    case ncclInt32: reduce_into<int32_t>(out, slots, at, n, nranks, op); break;
    case ncclUint32: reduce_into<uint32_t>(out, slots, at, n, nranks, op); break;
    case ncclInt64: reduce_into<int64_t>(out, slots, at, n, nranks, op); break;
    case ncclUint64: reduce_into<uint64_t>(out, slots, at, n, nranks, op); break;
    case ncclFloat32: reduce_into<float>(out, slots, at, n, nranks, op); break;
    default: reduce_into<double>(out, slots, at, n, nranks, op); break;
    }
}

// Piece k of the call in progress: elements [k per_piece, ...) of the all-reduce's buffer, of each rank's
// block of the reduce-scatter (all N of them in one slot), of the all-gather's send buffer
static size_t piece_elems(const ncclComm* c) {
    size_t at = c->piece * c->per_piece;
    return c->count - at < c->per_piece ? c->count - at : c->per_piece;
}

static void post(ncclComm* c) {
    Slot* me = &c->seg->slot[c->rank];
    size_t at = c->piece * c->per_piece, n = piece_elems(c), e = c->esize;
    cuda_cpu::DeviceAccess open;
    if (c->kind == REDUCE_SCATTER)
        for (int j = 0; j < c->nranks; j++) memcpy(me->data + j * n * e, c->send + (j * c->count + at) * e, n * e);
    else
        memcpy(me->data, c->send + at * e, n * e);
    me->kind = c->kind, me->type = c->type, me->op = c->op, me->count = c->count, me->call = c->calls;
    me->posted.store(c->seq + 1);
}

static ncclResult_t compare_calls(ncclComm* c) {
    const Slot* s = c->seg->slot;
    for (int r = 1; r < c->nranks; r++)
        if (s[r].kind != s[0].kind || s[r].type != s[0].type || s[r].count != s[0].count ||
            (s[r].kind != ALL_GATHER && s[r].op != s[0].op) || s[r].call != s[0].call)
            return fail(c, ncclInvalidUsage, "the ranks called different collectives: rank %d's call #%llu is "
                        "%s(count %llu, type %d, op %d), rank 0's #%llu %s(count %llu, type %d, op %d)", r,
                        (unsigned long long)s[r].call, kind_names[s[r].kind], (unsigned long long)s[r].count,
                        s[r].type, s[r].op, (unsigned long long)s[0].call, kind_names[s[0].kind],
                        (unsigned long long)s[0].count, s[0].type, s[0].op);
    return ncclSuccess;
}

static void collect(ncclComm* c) {
    const Slot* s = c->seg->slot;
    size_t at = c->piece * c->per_piece, n = piece_elems(c), e = c->esize;
    cuda_cpu::DeviceAccess open;
    if (c->kind == ALL_REDUCE) reduce(c->recv + at * e, s, 0, n, c->nranks, c->type, c->op);
    else if (c->kind == REDUCE_SCATTER) reduce(c->recv + at * e, s, c->rank * n * e, n, c->nranks, c->type, c->op);
    else
        for (int r = 0; r < c->nranks; r++) memcpy(c->recv + (r * c->count + at) * e, s[r].data, n * e);
}

static ncclResult_t progress(ncclComm* c) {
    if (c->state != ncclInProgress) return c->state;
    if (!c->joined) return join(c);
    Slot* slots = c->seg->slot;
    while (c->piece < c->pieces) {
        if (!c->posted) {                    // our slot is free once every rank has read the last piece
            for (int r = 0; r < c->nranks; r++)
                if (slots[r].read.load() < c->seq) return waiting(c);
            post(c);
            c->posted = 1;
        }
        for (int r = 0; r < c->nranks; r++)
            if (slots[r].posted.load() < c->seq + 1) return waiting(c);
        if (compare_calls(c) != ncclSuccess) return c->state;
        collect(c);
        slots[c->rank].read.store(++c->seq);
        c->piece++;
        c->posted = 0;
    }
    return c->state = ncclSuccess;
}

// What a call returns: a non-blocking communicator's state (ncclInProgress until done), or for a blocking
// one, the outcome, waited for
static ncclResult_t run(ncclComm* c) {
    ncclResult_t r = progress(c);
    while (r == ncclInProgress && c->blocking) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        r = progress(c);
    }
    return r;
}

static ncclResult_t collective(ncclComm* c, int kind, const void* send, void* recv, size_t count, int type, int op) {
    if (!c) return fail(NULL, ncclInvalidArgument, "%s on a NULL communicator", kind_names[kind]);
    if (c->state == ncclInProgress)
        return fail(c, ncclInvalidUsage, "%s called before the previous call completed (poll "
                    "ncclCommGetAsyncError until it is no longer ncclInProgress)", kind_names[kind]);
    if (c->state != ncclSuccess) return c->state;
    size_t e = type_size(type);
    if (!e) return fail(c, ncclInvalidArgument, "%s: type %d is not one this runtime reduces", kind_names[kind], type);
    if (op < ncclSum || op > ncclAvg) return fail(c, ncclInvalidArgument, "%s: no reduction %d", kind_names[kind], op);
    size_t n = c->nranks;
    size_t send_bytes = count * e * (kind == REDUCE_SCATTER ? n : 1), recv_bytes = count * e * (kind == ALL_GATHER ? n : 1);
    if (cuda_cpu_device_range(send, send_bytes) != 1 || cuda_cpu_device_range(recv, recv_bytes) != 1)
        return fail(c, ncclInvalidArgument, "%s: the buffers must be device memory of %zu and %zu bytes",
                    kind_names[kind], send_bytes, recv_bytes);
    c->kind = kind, c->type = type, c->op = op;
    c->send = (const char*)send, c->recv = (char*)recv, c->count = count, c->esize = e;
    c->per_piece = PIECE / e / (kind == REDUCE_SCATTER ? n : 1);
    c->pieces = count ? (count + c->per_piece - 1) / c->per_piece : 1;
    c->piece = 0, c->posted = 0;
    c->calls++;
    c->state = ncclInProgress;
    return run(c);
}

}  // namespace nccl_cpu

static inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
static inline const char* ncclGetLastError(ncclComm_t c) { return c && c->error[0] ? c->error : nccl_cpu::last_error; }
static inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }

static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static unsigned serial;
    const char* dir = "/dev/shm";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK) != 0)
        dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(id, 0, sizeof(*id));
    int n = snprintf(id->internal, sizeof(id->internal), "%s/nccl_cpu.%ld.%u.%lx", dir, (long)getpid(), serial++,
                     (unsigned long)(ts.tv_sec * 1000000007L + ts.tv_nsec));
    return n < (int)sizeof(id->internal) ? ncclSuccess
                                         : nccl_cpu::fail(NULL, ncclInvalidArgument, "TMPDIR %s is too long", dir);
}

static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                                  ncclConfig_t* config) {
    if (nranks < 1 || nranks > nccl_cpu::MAX_RANKS || rank < 0 || rank >= nranks)
        return nccl_cpu::fail(NULL, ncclInvalidArgument, "rank %d of %d ranks (this runtime takes 1 to %d ranks)",
                              rank, nranks, nccl_cpu::MAX_RANKS);
    if (!memchr(id.internal, 0, sizeof(id.internal)) || strncmp(id.internal, "/", 1) != 0)
        return nccl_cpu::fail(NULL, ncclInvalidArgument, "not an id from this runtime's ncclGetUniqueId");
    ncclComm* c = (ncclComm*)calloc(1, sizeof(ncclComm));
    if (!c) return nccl_cpu::fail(NULL, ncclSystemError, "out of memory");
    memcpy(c->path, id.internal, sizeof(c->path));
    c->rank = rank, c->nranks = nranks;
    c->blocking = !(config && config->blocking == 0);
    c->state = ncclInProgress;
    *out = c;
    return nccl_cpu::run(c);
}
static inline ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
    if (!c || !state) return ncclInvalidArgument;
    *state = nccl_cpu::progress(c);
    return ncclSuccess;
}

// The runtime has no operations in flight once a call has completed: nothing to flush.
static inline ncclResult_t ncclCommFinalize(ncclComm_t c) {
    return !c ? ncclInvalidArgument : c->state == ncclInProgress ? ncclInvalidUsage : ncclSuccess;
}

// Leaves the communicator: status LEFT (ncclCommDestroy) or ABORTED (ncclCommAbort), seen by the other
// ranks' next wait; rank 0's name is removed if the init never completed.
static inline ncclResult_t nccl_cpu_leave(ncclComm_t c, int status) {
    if (!c) return ncclInvalidArgument;
    if (c->seg) {
        c->seg->slot[c->rank].status.store(status);
        munmap(c->seg, nccl_cpu::segment_bytes(c->nranks));
    }
    if (!c->joined && c->rank == 0) unlink(c->path);
    free(c);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) { return nccl_cpu_leave(c, nccl_cpu::LEFT); }
static inline ncclResult_t ncclCommAbort(ncclComm_t c) { return nccl_cpu_leave(c, nccl_cpu::ABORTED); }

static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                         ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
    return nccl_cpu::collective(c, nccl_cpu::ALL_REDUCE, send, recv, count, type, op);
}
static inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type,
                                             ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
    return nccl_cpu::collective(c, nccl_cpu::REDUCE_SCATTER, send, recv, recvcount, type, op);
}
static inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type,
                                         ncclComm_t c, cudaStream_t) {
    return nccl_cpu::collective(c, nccl_cpu::ALL_GATHER, send, recv, sendcount, type, ncclSum);
}
