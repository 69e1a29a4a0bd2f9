// padkit's optional native backend: convolution, transposed convolution and pooling with
// per-side pads (oneDNN's padding_l / padding_r) in one primitive, forward and backward.
//
// A plain C ABI over oneDNN's C++ API, loaded by padkit/native/_lib.py with ctypes. No torch
// headers: the caller passes raw pointers and an int64 parameter block (layout below), and
// allocates every output. Primitives and reorders are cached per parameter block (which
// includes the thread count: a primitive is built for the OpenMP team it runs on). No
// tensor's values are kept from one call to the next: a weight is read (and reordered
// into the primitive's layout where that differs) on every call, so a weight changed in
// place by any route (`.data`, fused optimizers, a preserved version counter) is the
// weight the next call computes with. One mutex guards the cache and each execution;
// fork handlers take it around fork() and give the child an empty cache.
//
// Parameter block, conv (kind 0) and transposed conv (kind 1):
//   [0] kind  [1] threads  [2] dtype (0 f32, 1 bf16)  [3] nd  [4] groups  [5] has_bias
//   [6] N  [7] IC  [8] OC  [9] training  [10] channels-last
//   then per spatial axis: in, out, kernel, stride, dilation-1, pad_l, pad_r   (7 * nd)
//   then strides (torch, elements) of src, dst, weight: 3 * (nd + 2)
// Pooling (kind 2):
//   [0] 2  [1] threads  [2] dtype  [3] nd  [4] algorithm (0 max, 1 avg incl. pads,
//   2 avg excl. pads)  [5] blocked (NCHW only: pool on oneDNN's nChw16c layout, reordering
//   in and out)  [6] N  [7] C  [8] C  [9] training  [10] channels-last
//   then per axis as above, then strides of src and dst: 2 * (nd + 2)

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

using namespace dnnl;
using dims_t = memory::dims;

namespace {

thread_local std::string g_error;
std::mutex g_mutex;

engine& eng() {
  static engine e(engine::kind::cpu, 0);
  return e;
}

stream& strm() {
  static stream s(eng());
  return s;
}

struct Params {
  int64_t kind, threads, dtype, nd, groups, has_bias, N, IC, OC, training, cl;
  dims_t in, out, k, s, d, pl, pr;
  dims_t src_st, dst_st, wei_st;
  bool force_any = false;  // NCHW: let oneDNN choose the layout (see resolve_layout)
  // NCHW forward: the pads are written into the blocked source buffer (zeros around the
  // reordered input) and the primitive runs unpadded (see resolve_layout); src_pl / src_pr
  // hold the pads, pl / pr are zero then
  bool pad_in_src = false;
  dims_t src_pl, src_pr;
  // NCHW: the channel block of the blocked layout (16; 8 where the instruction set's direct
  // kernels take only that, AVX2, for a source with its pads)
  int64_t block = 16;
  std::vector<int64_t> key;

  explicit Params(const int64_t* p) {
    kind = p[0];
    threads = p[1];
    dtype = p[2];
    nd = p[3];
    groups = p[4];
    has_bias = p[5];
    N = p[6];
    IC = p[7];
    OC = p[8];
    training = p[9];
    cl = p[10];
    if (nd < 1 || nd > 3) throw std::runtime_error("nd must be 1, 2 or 3");
    int64_t i = 11;
    for (int64_t a = 0; a < nd; ++a) {
      in.push_back(p[i++]);
      out.push_back(p[i++]);
      k.push_back(p[i++]);
      s.push_back(p[i++]);
      d.push_back(p[i++]);
      pl.push_back(p[i++]);
      pr.push_back(p[i++]);
    }
    const int64_t r = nd + 2;
    for (int64_t a = 0; a < r; ++a) src_st.push_back(p[i++]);
    for (int64_t a = 0; a < r; ++a) dst_st.push_back(p[i++]);
    if (kind != 2) {
      for (int64_t a = 0; a < r; ++a) wei_st.push_back(p[i++]);
    }
    key.assign(p, p + i);  // the thread count included: a primitive per OpenMP team size
  }

  memory::data_type dt() const {
    return dtype == 1 ? memory::data_type::bf16 : memory::data_type::f32;
  }
  dims_t src_dims() const {
    dims_t v{N, IC};
    v.insert(v.end(), in.begin(), in.end());
    return v;
  }
  dims_t dst_dims() const {
    dims_t v{N, OC};
    v.insert(v.end(), out.begin(), out.end());
    return v;
  }
  bool channels_last() const { return cl != 0; }

  memory::desc user_src() const { return memory::desc(src_dims(), dt(), src_st); }
  memory::desc user_dst() const { return memory::desc(dst_dims(), dt(), dst_st); }
  // what the primitive works on: the user layout in channels-last (oneDNN's nhwc kernels);
  // in NCHW the 16-channel blocked layout torch's own oneDNN path uses (nChw16c), with a
  // reorder in and out, or oneDNN's choice where the channels are not a multiple of 16
  memory::desc prim_src() const {
    if (channels_last()) return user_src();
    if (pad_in_src) {
      dims_t v{N, IC};
      for (int64_t a = 0; a < nd; ++a) v.push_back(in[a] + src_pl[a] + src_pr[a]);
      return memory::desc(v, dt(), nchw_tag(IC));
    }
    return memory::desc(src_dims(), dt(), nchw_tag(IC));
  }
  memory::desc prim_dst() const {
    return channels_last() ? user_dst() : memory::desc(dst_dims(), dt(), nchw_tag(OC));
  }
  memory::format_tag any_tag() const { return memory::format_tag::any; }
  memory::format_tag nchw_tag(int64_t channels) const {
    if (force_any || channels % block != 0) return any_tag();
    static const memory::format_tag tags16[] = {memory::format_tag::nCw16c,
                                                memory::format_tag::nChw16c,
                                                memory::format_tag::nCdhw16c};
    static const memory::format_tag tags8[] = {
        memory::format_tag::nCw8c, memory::format_tag::nChw8c, memory::format_tag::nCdhw8c};
    return block == 8 ? tags8[nd - 1] : tags16[nd - 1];
  }

  // weights, oneDNN order: [G,] OC/G, IC/G, k...
  dims_t wei_dims() const {
    dims_t v;
    if (groups > 1) v.push_back(groups);
    v.push_back(OC / groups);
    v.push_back(IC / groups);
    v.insert(v.end(), k.begin(), k.end());
    return v;
  }
  memory::desc user_wei() const {
    // torch: conv (OC, IC/G, k...), transposed (IC, OC/G, k...)
    dims_t st;
    int64_t oc_st, ic_st, g_st;
    if (kind == 0) {
      oc_st = wei_st[0];
      ic_st = wei_st[1];
      g_st = (OC / groups) * wei_st[0];
    } else {
      oc_st = wei_st[1];
      ic_st = wei_st[0];
      g_st = (IC / groups) * wei_st[0];
    }
    if (groups > 1) st.push_back(g_st);
    st.push_back(oc_st);
    st.push_back(ic_st);
    for (int64_t a = 0; a < nd; ++a) st.push_back(wei_st[2 + a]);
    return memory::desc(wei_dims(), dt(), st);
  }
  memory::desc prim_wei() const { return memory::desc(wei_dims(), dt(), any_tag()); }
  memory::desc bias_md() const {
    return has_bias ? memory::desc({OC}, dt(), memory::format_tag::a) : memory::desc();
  }
};

// Inference staging memory, shared by every primitive: one buffer per role (the first
// input, the second input, the output), grown to the largest call seen (with headroom, so a
// run of growing sizes does not regrow on every call) and never shrunk until the cache is
// cleared. Calls run one at a time under g_mutex and no value outlives its call, so the
// signatures can share it: a workload of many sizes then reuses the memory the previous call
// just touched (hot in the caches, no page faults), where a buffer kept per signature was
// cold on every call (40 cycling sizes of a depthwise 3x3 s2 conv: 1.2x torch's own conv;
// kept per signature they also added up to 3 MB a size).
struct Arena {
  void* ptr = nullptr;
  size_t size = 0;
  void* get(size_t want) {
    if (want <= size) return ptr;
    std::free(ptr);
    size_t grown = std::max(want, size + size / 2);
    grown = (grown + 4095) / 4096 * 4096;
    ptr = std::aligned_alloc(4096, grown);
    if (ptr == nullptr) {
      size = 0;
      throw std::bad_alloc();
    }
    size = grown;
    return ptr;
  }
  void release() {
    std::free(ptr);
    ptr = nullptr;
    size = 0;
  }
};

enum Role { kFirstIn = 0, kSecondIn = 1, kOut = 2, kPaddedIn = 3 };
// a padded source is reordered a (image, channel block) at a time (Staged::setup_rows) up
// to this many of them, each at least this many elements
constexpr int64_t kMaxRows = 256;
constexpr int64_t kMinRow = 4096;
Arena g_arena[4];
// kPaddedIn holds a source with its pads in the buffer (Staged::setup_padded): the
// signature whose zeroed borders it holds now (0: none). Only such sources write it, and
// each writes its interior only, so the borders stay zero until another signature's
// geometry takes the buffer (which zeroes it again).
uint64_t g_padded_owner = 0;
uint64_t g_padded_made = 0;

// A user buffer seen through the layout a primitive wants: a reorder when they differ. In
// inference the buffer in the primitive's layout is the role's shared arena (above): a
// buffer allocated per call costs its page faults on every call (depthwise 3x3 s2 at N = 8,
// NCHW, went from 0.46 to 1.00 of torch's time). In training it is allocated per call and
// freed on return: a training step holds many signatures' passes (forward, backward data,
// weight gradient) at once, and kept buffers had added a third to tf_efficientnet_b0's peak
// memory. Either way it is overwritten by every call: no value outlives its call.
struct Staged {
  bool needed = false;
  bool per_call = false;
  Role role = kFirstIn;
  memory::desc want;
  memory buf;  // the current call's buffer in the primitive's layout
  reorder prim;

  // an input reordered into the interior of a zeroed, larger buffer (pads in the buffer:
  // the borders are zeroed when this signature takes the shared kPaddedIn buffer, and
  // every call overwrites the interior only); forward passes only
  bool padded = false;
  uint64_t id = 0;
  memory::desc window_md;
  // the same, one (image, channel block) at a time, where each one's interior is contiguous
  // in the buffer (a 1-d conv's row): dense reorders, which oneDNN runs with its blocked
  // kernels, where one reorder into the strided window runs its generic one (a causal
  // 1-d conv's forward spent about a tenth of its time more in it than in a dense reorder)
  bool rows = false;
  reorder row_prim;
  memory row_src, row_dst;
  std::vector<std::pair<int64_t, int64_t>> row_offsets;  // bytes: user source, buffer

  void setup_padded(const memory::desc& user, const memory::desc& w, const dims_t& lo,
                    int64_t block, memory::format_tag tag) {
    needed = true;
    padded = true;
    want = w;
    role = kPaddedIn;
    id = ++g_padded_made;
    const dims_t dims = user.get_dims();
    dims_t offsets(dims.size(), 0);
    for (size_t a = 0; a < lo.size(); ++a) offsets[2 + a] = lo[a];
    window_md = want.submemory_desc(dims, offsets);
    memory u(user, eng(), nullptr);
    prim = reorder(u, memory(window_md, eng(), nullptr));
    setup_rows(user, w, lo, block, tag);
  }

  void setup_rows(const memory::desc& user, const memory::desc& w, const dims_t& lo,
                  int64_t block, memory::format_tag tag) {
    const dims_t dims = user.get_dims(), full = w.get_dims(), st = user.get_strides();
    if (tag == memory::format_tag::any || st.empty() || dims[1] % block != 0) return;
    const size_t r = dims.size();
    // contiguous interior: the axes inside the outermost spatial one longer than 1 unpadded
    size_t outer = r;
    for (size_t a = 2; a < r; ++a) {
      if (dims[a] > 1) {
        outer = a;
        break;
      }
    }
    for (size_t a = outer + 1; a < r; ++a) {
      if (dims[a] != full[a]) return;
    }
    const int64_t blocks = dims[1] / block, n_rows = dims[0] * blocks;
    int64_t row = block, plane = block, start = 0;
    for (size_t a = 2; a < r; ++a) row *= dims[a];
    if (n_rows > kMaxRows || row < kMinRow) return;
    for (size_t a = r; a-- > 2;) {
      start += lo[a - 2] * plane;
      plane *= full[a];
    }
    const int64_t bytes = static_cast<int64_t>(memory::data_type_size(user.get_data_type()));
    dims_t one = dims;
    one[0] = 1;
    one[1] = block;
    memory::desc src_md(one, user.get_data_type(), st);
    memory::desc dst_md(one, w.get_data_type(), tag);
    row_src = memory(src_md, eng(), nullptr);
    row_dst = memory(dst_md, eng(), nullptr);
    row_prim = reorder(row_src, row_dst);
    row_offsets.clear();
    for (int64_t n = 0; n < dims[0]; ++n) {
      for (int64_t b = 0; b < blocks; ++b) {
        row_offsets.emplace_back((n * st[0] + b * block * st[1]) * bytes,
                                 ((n * blocks + b) * plane + start) * bytes);
      }
    }
    rows = true;
  }

  void setup(const memory::desc& user, const memory::desc& w, Role r, bool training) {
    needed = user != w;
    if (!needed) return;
    want = w;
    role = r;
    per_call = training;
    memory u(user, eng(), nullptr);
    memory b(want, eng(), nullptr);
    prim = r == kOut ? reorder(b, u) : reorder(u, b);
  }
  // this call's buffer in the primitive's layout
  memory fresh() {
    if (per_call) return memory(want, eng());
    return memory(want, eng(), g_arena[role].get(want.get_size()));
  }
  // input: user memory -> what the primitive reads
  memory in(const memory::desc& user, void* ptr) {
    memory u(user, eng(), ptr);
    if (!needed) return u;
    if (padded) {
      // the owner's size fitted when it zeroed the buffer, and the buffer never shrinks
      // (clear_all resets the owner): it holds this geometry's zero borders
      void* padded_buf = g_arena[kPaddedIn].get(want.get_size());
      if (g_padded_owner != id) {
        std::memset(padded_buf, 0, want.get_size());
        g_padded_owner = id;
      }
      if (rows) {
        char* from = static_cast<char*>(ptr);
        char* to = static_cast<char*>(padded_buf);
        for (const auto& [at_src, at_dst] : row_offsets) {
          row_src.set_data_handle(from + at_src);
          row_dst.set_data_handle(to + at_dst);
          row_prim.execute(strm(), row_src, row_dst);
        }
      } else {
        memory window(window_md, eng(), padded_buf);
        prim.execute(strm(), u, window);
      }
      return memory(want, eng(), padded_buf);
    }
    memory b = fresh();
    prim.execute(strm(), u, b);
    return b;
  }
  memory out(const memory::desc& user, void* ptr) {
    if (!needed) return memory(user, eng(), ptr);
    buf = fresh();
    return buf;
  }
  void flush(const memory::desc& user, void* ptr) {
    if (!needed) return;
    memory u(user, eng(), ptr);
    prim.execute(strm(), buf, u);
    buf = memory();  // the call's buffer goes (or is the arena's again)
  }
};

struct ConvFwd {
  primitive_desc pd;
  primitive prim;
  Staged src, wei, dst;
};

struct ConvBwdData {
  primitive prim;
  Staged diff_dst, wei, diff_src;
};

struct ConvBwdWei {
  primitive prim;
  Staged src, diff_dst, diff_wei;
};

struct PoolFwd {
  pooling_forward::primitive_desc pd;
  pooling_forward prim;
  Staged src, dst;
  memory::desc ws_md;
};

struct PoolBwd {
  pooling_backward prim;
  Staged diff_dst, diff_src;
  memory::desc ws_md;
};

template <class T>
using Cache = std::map<std::vector<int64_t>, std::unique_ptr<T>>;

Cache<ConvFwd> g_conv_fwd;
Cache<ConvBwdData> g_conv_bd;
Cache<ConvBwdWei> g_conv_bw;
Cache<PoolFwd> g_pool_fwd;
Cache<PoolBwd> g_pool_bwd;

constexpr size_t kMaxEntries = 512;

// empty a cache without running its entries' destructors (the fork child)
template <class T>
void leak(Cache<T>& c) {
  for (auto& kv : c) kv.second.release();
  c.clear();
}

// The entries made since a mark, in order: (which cache, key). The tuner marks before it
// checks and times a signature and, where it leaves the signature to torch, drops what was
// made since (the primitives and their reorder buffers would otherwise stay for the life
// of the process). Bounded: past kMaxLog the log restarts and older marks drop nothing.
constexpr size_t kMaxLog = 4096;
std::vector<std::pair<int, std::vector<int64_t>>> g_made;
uint64_t g_made_base = 0;  // the number of entries logged before g_made[0]

template <class T>
T* slot(Cache<T>& c, const std::vector<int64_t>& key, bool& fresh, int which) {
  auto it = c.find(key);
  if (it != c.end()) {
    fresh = false;
    return it->second.get();
  }
  if (c.size() >= kMaxEntries) c.clear();
  if (g_made.size() >= kMaxLog) {
    g_made_base += g_made.size();
    g_made.clear();
  }
  g_made.emplace_back(which, key);
  fresh = true;
  auto& ref = c[key];
  ref = std::make_unique<T>();
  return ref.get();
}

prop_kind fwd_prop(const Params& p) {
  return p.training ? prop_kind::forward_training : prop_kind::forward_inference;
}

convolution_forward::primitive_desc conv_hint(const Params& p) {
  return convolution_forward::primitive_desc(eng(), fwd_prop(p), algorithm::convolution_direct,
                                             p.prim_src(), p.prim_wei(), p.bias_md(),
                                             p.prim_dst(), p.s, p.d, p.pl, p.pr);
}

deconvolution_forward::primitive_desc deconv_hint(const Params& p) {
  return deconvolution_forward::primitive_desc(
      eng(), fwd_prop(p), algorithm::deconvolution_direct, p.prim_src(), p.prim_wei(),
      p.bias_md(), p.prim_dst(), p.s, p.d, p.pl, p.pr);
}

// whether oneDNN's implementation is a direct kernel: not its reference loops, not a GEMM
// over an im2col copy (both run where its direct kernels take no such pads)
bool direct(const std::string& impl) {
  return impl.rfind("ref", 0) != 0 && impl.find("gemm") == std::string::npos;
}

// oneDNN has no direct kernel for some pads on the blocked layout (its reference loops or a
// GEMM over an im2col copy run instead: causal dilated convs, forward). For the forward
// pass the pads then go into the blocked source buffer, which the input is reordered into
// anyway, and the primitive runs unpadded on it (no copy more than the reorder, and the
// blocked kernels torch's own conv uses; training's forward too: its backward passes keep
// the pads, which their direct kernels take). Elsewhere, where only the reference loops
// run, oneDNN chooses the layout (for a 1-d conv a channels-last one, with a transposing
// reorder in and out)
Params resolve_layout(const Params& p, bool forward) {
  if (p.channels_last()) return p;
  std::string impl = p.kind == 0 ? conv_hint(p).impl_info_str() : deconv_hint(p).impl_info_str();
  if (direct(impl)) return p;
  if (p.kind == 0 && (forward || p.training == 0) && p.IC % 16 == 0) {
    Params q = p;
    q.pad_in_src = true;
    q.src_pl = p.pl;
    q.src_pr = p.pr;
    std::fill(q.pl.begin(), q.pl.end(), 0);
    std::fill(q.pr.begin(), q.pr.end(), 0);
    for (int64_t block : {16, 8}) {
      q.block = block;
      if (direct(conv_hint(q).impl_info_str())) return q;
    }
  }
  if (impl.rfind("ref", 0) != 0) return p;
  Params q = p;
  q.force_any = true;
  return q;
}

primitive_desc conv_fwd_pd(const Params& p) {
  if (p.kind == 0) return conv_hint(p);
  return deconv_hint(p);
}

// Run a pass and wait for it. The callers build the arguments in a scope of their own, so
// the inputs' staging buffers (allocated per call in training) are freed before the
// output's reorder into the caller's tensor: a call never holds its inputs' copies, its
// output's copy and the caller's output at once (held, they had lifted the training peak
// of 8 x Conv2d(256, 256, 4) at N=4, 32x32 by 4 MB, one activation's size).
void run(const primitive& prim, const std::unordered_map<int, memory>& args) {
  prim.execute(strm(), args);
  strm().wait();
}

void set_threads(const Params& p) {
  if (p.threads > 0 && omp_get_max_threads() != p.threads) {
    omp_set_num_threads(static_cast<int>(p.threads));
  }
}

void conv_forward(const int64_t* raw, void* src, void* wei, void* bias, void* dst) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  set_threads(p);
  bool fresh;
  ConvFwd* e = slot(g_conv_fwd, p.key, fresh, 0);
  if (fresh) {
    const Params q = resolve_layout(p, true);
    e->pd = conv_fwd_pd(q);
    e->prim = primitive(e->pd);
    if (q.pad_in_src) {
      e->src.setup_padded(p.user_src(), e->pd.src_desc(), q.src_pl, q.block, q.nchw_tag(q.IC));
    } else {
      e->src.setup(p.user_src(), e->pd.src_desc(), kFirstIn, p.training != 0);
    }
    e->wei.setup(p.user_wei(), e->pd.weights_desc(), kSecondIn, p.training != 0);
    e->dst.setup(p.user_dst(), e->pd.dst_desc(), kOut, p.training != 0);
  }
  {  // the inputs' staging buffers go before the output's reorder (see run)
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, e->src.in(p.user_src(), src)},
        {DNNL_ARG_WEIGHTS, e->wei.in(p.user_wei(), wei)},  // read on every call
        {DNNL_ARG_DST, e->dst.out(p.user_dst(), dst)}};
    if (p.has_bias) args[DNNL_ARG_BIAS] = memory(p.bias_md(), eng(), bias);
    run(e->prim, args);
  }
  e->dst.flush(p.user_dst(), dst);
  strm().wait();
}

void conv_backward_data(const int64_t* raw, void* diff_dst, void* wei, void* diff_src) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  set_threads(p);
  bool fresh;
  ConvBwdData* e = slot(g_conv_bd, p.key, fresh, 1);
  memory::desc dsrc, dwei, ddst;
  if (fresh) {
    const Params q = resolve_layout(p, false);
    if (p.kind == 0) {
      auto pd = convolution_backward_data::primitive_desc(
          eng(), algorithm::convolution_direct, q.prim_src(), q.prim_wei(), q.prim_dst(), p.s,
          p.d, p.pl, p.pr, conv_hint(q));
      e->prim = convolution_backward_data(pd);
      dsrc = pd.diff_src_desc();
      dwei = pd.weights_desc();
      ddst = pd.diff_dst_desc();
    } else {
      auto pd = deconvolution_backward_data::primitive_desc(
          eng(), algorithm::deconvolution_direct, q.prim_src(), q.prim_wei(), q.prim_dst(), p.s,
          p.d, p.pl, p.pr, deconv_hint(q));
      e->prim = deconvolution_backward_data(pd);
      dsrc = pd.diff_src_desc();
      dwei = pd.weights_desc();
      ddst = pd.diff_dst_desc();
    }
    e->diff_dst.setup(p.user_dst(), ddst, kFirstIn, p.training != 0);
    e->wei.setup(p.user_wei(), dwei, kSecondIn, p.training != 0);
    e->diff_src.setup(p.user_src(), dsrc, kOut, p.training != 0);
  }
  run(e->prim, {{DNNL_ARG_DIFF_DST, e->diff_dst.in(p.user_dst(), diff_dst)},
                {DNNL_ARG_WEIGHTS, e->wei.in(p.user_wei(), wei)},
                {DNNL_ARG_DIFF_SRC, e->diff_src.out(p.user_src(), diff_src)}});
  e->diff_src.flush(p.user_src(), diff_src);
  strm().wait();
}

void conv_backward_weights(const int64_t* raw, void* src, void* diff_dst, void* diff_wei,
                           void* diff_bias) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  set_threads(p);
  bool fresh;
  ConvBwdWei* e = slot(g_conv_bw, p.key, fresh, 2);
  if (fresh) {
    const Params q = resolve_layout(p, false);
    memory::desc s, dw, dd;
    if (p.kind == 0) {
      auto pd = convolution_backward_weights::primitive_desc(
          eng(), algorithm::convolution_direct, q.prim_src(), q.prim_wei(), p.bias_md(),
          q.prim_dst(), p.s, p.d, p.pl, p.pr, conv_hint(q));
      e->prim = convolution_backward_weights(pd);
      s = pd.src_desc();
      dw = pd.diff_weights_desc();
      dd = pd.diff_dst_desc();
    } else {
      auto pd = deconvolution_backward_weights::primitive_desc(
          eng(), algorithm::deconvolution_direct, q.prim_src(), q.prim_wei(), p.bias_md(),
          q.prim_dst(), p.s, p.d, p.pl, p.pr, deconv_hint(q));
      e->prim = deconvolution_backward_weights(pd);
      s = pd.src_desc();
      dw = pd.diff_weights_desc();
      dd = pd.diff_dst_desc();
    }
    e->src.setup(p.user_src(), s, kFirstIn, p.training != 0);
    e->diff_dst.setup(p.user_dst(), dd, kSecondIn, p.training != 0);
    e->diff_wei.setup(p.user_wei(), dw, kOut, p.training != 0);
  }
  {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, e->src.in(p.user_src(), src)},
        {DNNL_ARG_DIFF_DST, e->diff_dst.in(p.user_dst(), diff_dst)},
        {DNNL_ARG_DIFF_WEIGHTS, e->diff_wei.out(p.user_wei(), diff_wei)}};
    if (p.has_bias) args[DNNL_ARG_DIFF_BIAS] = memory(p.bias_md(), eng(), diff_bias);
    run(e->prim, args);
  }
  e->diff_wei.flush(p.user_wei(), diff_wei);
  strm().wait();
}

algorithm pool_alg(const Params& p) {
  switch (p.groups) {
    case 0:
      return algorithm::pooling_max;
    case 1:
      return algorithm::pooling_avg_include_padding;
    default:
      return algorithm::pooling_avg_exclude_padding;
  }
}

// pooling needs a defined source layout: the user's, or the 16-channel blocked one
memory::desc pool_md(const Params& p, const dims_t& dims, const memory::desc& user) {
  if (p.channels_last() || p.has_bias == 0) return user;
  static const memory::format_tag tags[] = {memory::format_tag::nCw16c,
                                            memory::format_tag::nChw16c,
                                            memory::format_tag::nCdhw16c};
  return memory::desc(dims, p.dt(), tags[p.nd - 1]);
}

pooling_forward::primitive_desc pool_fwd_pd(const Params& p) {
  return pooling_forward::primitive_desc(
      eng(), fwd_prop(p), pool_alg(p), pool_md(p, p.src_dims(), p.user_src()),
      pool_md(p, p.dst_dims(), p.user_dst()), p.s, p.k, p.d, p.pl, p.pr);
}

PoolFwd* pool_fwd_entry(const Params& p) {
  bool fresh;
  PoolFwd* e = slot(g_pool_fwd, p.key, fresh, 3);
  if (fresh) {
    e->pd = pool_fwd_pd(p);
    e->prim = pooling_forward(e->pd);
    e->src.setup(p.user_src(), e->pd.src_desc(), kFirstIn, p.training != 0);
    e->dst.setup(p.user_dst(), e->pd.dst_desc(), kOut, p.training != 0);
    e->ws_md = e->pd.workspace_desc();
  }
  return e;
}

int64_t pool_workspace(const int64_t* raw) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(pool_fwd_entry(p)->ws_md.get_size());
}

void pool_forward(const int64_t* raw, void* src, void* dst, void* ws) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  set_threads(p);
  PoolFwd* e = pool_fwd_entry(p);
  {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e->src.in(p.user_src(), src)},
                                         {DNNL_ARG_DST, e->dst.out(p.user_dst(), dst)}};
    if (e->ws_md.get_size() > 0) args[DNNL_ARG_WORKSPACE] = memory(e->ws_md, eng(), ws);
    run(e->prim, args);
  }
  e->dst.flush(p.user_dst(), dst);
  strm().wait();
}

void pool_backward(const int64_t* raw, void* diff_dst, void* diff_src, void* ws) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  set_threads(p);
  bool fresh;
  PoolBwd* e = slot(g_pool_bwd, p.key, fresh, 4);
  if (fresh) {
    auto hint = pool_fwd_entry(p)->pd;
    auto pd = pooling_backward::primitive_desc(
        eng(), pool_alg(p), pool_md(p, p.src_dims(), p.user_src()),
        pool_md(p, p.dst_dims(), p.user_dst()), p.s, p.k, p.d, p.pl, p.pr, hint);
    e->prim = pooling_backward(pd);
    e->diff_dst.setup(p.user_dst(), pd.diff_dst_desc(), kFirstIn, p.training != 0);
    e->diff_src.setup(p.user_src(), pd.diff_src_desc(), kOut, p.training != 0);
    e->ws_md = pd.workspace_desc();
  }
  {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, e->diff_dst.in(p.user_dst(), diff_dst)},
        {DNNL_ARG_DIFF_SRC, e->diff_src.out(p.user_src(), diff_src)}};
    if (e->ws_md.get_size() > 0) args[DNNL_ARG_WORKSPACE] = memory(e->ws_md, eng(), ws);
    run(e->prim, args);
  }
  e->diff_src.flush(p.user_src(), diff_src);
  strm().wait();
}

// the implementation oneDNN picks for one pass (0 forward, 1 backward data, 2 backward
// weights; pools: 0 forward, 1 backward), e.g. "brgconv:avx512_core" or "ref:any"
std::string impl_name(const int64_t* raw, int which) {
  Params p(raw);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (p.kind == 2) {
    auto fwd = pool_fwd_pd(p);
    if (which == 0) return fwd.impl_info_str();
    return pooling_backward::primitive_desc(
               eng(), pool_alg(p), pool_md(p, p.src_dims(), p.user_src()),
               pool_md(p, p.dst_dims(), p.user_dst()), p.s, p.k, p.d, p.pl, p.pr, fwd)
        .impl_info_str();
  }
  if (which == 0) return conv_fwd_pd(resolve_layout(p, true)).impl_info_str();
  const Params q = resolve_layout(p, false);
  if (q.kind == 0) {
    if (which == 1) {
      return convolution_backward_data::primitive_desc(eng(), algorithm::convolution_direct,
                                                       q.prim_src(), q.prim_wei(), q.prim_dst(),
                                                       q.s, q.d, q.pl, q.pr, conv_hint(q))
          .impl_info_str();
    }
    return convolution_backward_weights::primitive_desc(
               eng(), algorithm::convolution_direct, q.prim_src(), q.prim_wei(), q.bias_md(),
               q.prim_dst(), q.s, q.d, q.pl, q.pr, conv_hint(q))
        .impl_info_str();
  }
  if (which == 1) {
    return deconvolution_backward_data::primitive_desc(
               eng(), algorithm::deconvolution_direct, q.prim_src(), q.prim_wei(), q.prim_dst(),
               q.s, q.d, q.pl, q.pr, deconv_hint(q))
        .impl_info_str();
  }
  return deconvolution_backward_weights::primitive_desc(
             eng(), algorithm::deconvolution_direct, q.prim_src(), q.prim_wei(), q.bias_md(),
             q.prim_dst(), q.s, q.d, q.pl, q.pr, deconv_hint(q))
      .impl_info_str();
}

void clear_all() {
  g_made_base += g_made.size();
  g_made.clear();
  g_conv_fwd.clear();
  g_conv_bd.clear();
  g_conv_bw.clear();
  g_pool_fwd.clear();
  g_pool_bwd.clear();
  for (Arena& a : g_arena) a.release();
  g_padded_owner = 0;
}

// fork(): no other thread may hold the mutex while the address space is copied, and the
// child starts with no primitive built for the parent's OpenMP team (a GNU OpenMP team
// does not survive fork; a primitive keyed by the parent's thread count must not run)
void before_fork() { g_mutex.lock(); }
void after_fork_parent() { g_mutex.unlock(); }
void after_fork_child() {
  g_mutex.unlock();
  // the entries are leaked, not destroyed: their destructors may touch state (OpenMP,
  // oneDNN's scratchpads) that belonged to the parent's threads
  g_made.clear();
  leak(g_conv_fwd);
  leak(g_conv_bd);
  leak(g_conv_bw);
  leak(g_pool_fwd);
  leak(g_pool_bwd);
}

const int g_fork_handlers = pthread_atfork(before_fork, after_fork_parent, after_fork_child);

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const dnnl::error& err) {
    g_error = std::string("oneDNN: ") + err.what() + " (status " +
              std::to_string(static_cast<int>(err.status)) + ")";
  } catch (const std::exception& err) {
    g_error = err.what();
  } catch (...) {
    g_error = "unknown error";
  }
  return 1;
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

int padkit_dnnl_abi() { return 1; }

const char* padkit_dnnl_error() { return g_error.c_str(); }

int padkit_dnnl_version(int64_t* out) {
  const dnnl_version_t* v = dnnl_version();
  out[0] = v->major;
  out[1] = v->minor;
  out[2] = v->patch;
  return 0;
}

// the instruction set oneDNN dispatches to (dnnl_cpu_isa_t: 0x7 avx2, 0x27 avx512_core, ...),
// after ONEDNN_MAX_CPU_ISA and the CPU's own limits
int padkit_cpu_isa(int64_t* out) {
  out[0] = static_cast<int64_t>(get_effective_cpu_isa());
  return 0;
}

int padkit_conv_fwd(const int64_t* p, void* src, void* wei, void* bias, void* dst) {
  return guarded([&] { conv_forward(p, src, wei, bias, dst); });
}

int padkit_conv_bwd_data(const int64_t* p, void* diff_dst, void* wei, void* diff_src) {
  return guarded([&] { conv_backward_data(p, diff_dst, wei, diff_src); });
}

int padkit_conv_bwd_weights(const int64_t* p, void* src, void* diff_dst, void* diff_wei,
                            void* diff_bias) {
  return guarded([&] { conv_backward_weights(p, src, diff_dst, diff_wei, diff_bias); });
}

int padkit_pool_workspace(const int64_t* p, int64_t* size) {
  return guarded([&] { *size = pool_workspace(p); });
}

int padkit_pool_fwd(const int64_t* p, void* src, void* dst, void* ws) {
  return guarded([&] { pool_forward(p, src, dst, ws); });
}

int padkit_pool_bwd(const int64_t* p, void* diff_dst, void* diff_src, void* ws) {
  return guarded([&] { pool_backward(p, diff_dst, diff_src, ws); });
}

int padkit_impl(const int64_t* p, int which, char* buf, int64_t len) {
  return guarded([&] {
    std::string name = impl_name(p, which);
    std::strncpy(buf, name.c_str(), static_cast<size_t>(len - 1));
    buf[len - 1] = 0;
  });
}

int padkit_clear_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  clear_all();
  return 0;
}

int64_t padkit_cache_mark() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_made_base + g_made.size());
}

int padkit_cache_drop_since(int64_t mark) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (mark < 0 || static_cast<uint64_t>(mark) < g_made_base) return 0;
  size_t from = static_cast<size_t>(static_cast<uint64_t>(mark) - g_made_base);
  for (size_t i = from; i < g_made.size(); ++i) {
    const auto& key = g_made[i].second;
    switch (g_made[i].first) {
      case 0: g_conv_fwd.erase(key); break;
      case 1: g_conv_bd.erase(key); break;
      case 2: g_conv_bw.erase(key); break;
      case 3: g_pool_fwd.erase(key); break;
      default: g_pool_bwd.erase(key); break;
    }
  }
  if (from < g_made.size()) g_made.resize(from);
  return 0;
}

}  // extern "C"
#pragma GCC visibility pop
