// A guided sequence over a context-free grammar: the lexer state of the lexeme in progress and the Earley set
// of the lexemes before it. Lexing is contextual and greedy: a lexeme goes on while the next byte can extend a
// terminal the parser allows, and ends where it cannot (then the byte starts the next lexeme); a lexeme whose
// state has no way on ends at once.
//
// A step's mask is the union of two parts. The tokens that stay inside the lexeme depend on the lexer state
// only: one walk of the vocabulary trie per lexer-state shape, kept by the grammar (the Outlines index, per
// lexer state) and by the vocabulary for every grammar over it (a JSON string's contents are walked once per
// process), and patched from a like state's walk where most first bytes lead the two alike. The tokens that cross a lexeme boundary start at the walk's exits: each exit's lexeme goes
// to the parser, and the rest of the token is walked from the next lexer's start, through further boundaries.
// That part is cached per (Earley set, lexer state), shared by every guide of the grammar.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cfg_grammar.h"
#include "cfg_parser.h"
#include "vocab.h"

namespace tooldec::cfg {

constexpr size_t CROSSING_CACHE_SIZE = 1 << 15;
constexpr size_t AFTER_MEMO_SIZE = 1 << 16;
constexpr int64_t PARSER_ITEMS_LIMIT = 5'000'000;  // past this (~60 MB of items), new guides start a fresh parser

// The tokens that cross a lexeme boundary, per (Earley set, lexer state), bounded (cleared when full).
class CrossingCache {
 public:
  CrossingCache() { map_.reserve(4096); }  // a rehash of thousands of entries is a step's worth of time
  std::shared_ptr<const std::vector<int32_t>> get(uint64_t key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  void put(uint64_t key, std::shared_ptr<const std::vector<int32_t>> v) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map_.size() >= CROSSING_CACHE_SIZE) map_.clear();
    map_.emplace(key, std::move(v));
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<int32_t>>> map_;
};

// A grammar over one vocabulary, with the parser (and cache) its guides share.
class Compiled {
 public:
  Compiled(std::shared_ptr<Grammar> g, std::shared_ptr<Vocab> v, std::vector<int64_t> term_minlen,
           std::vector<std::vector<int64_t>> term_dist)
      : g_(std::move(g)), v_(std::move(v)), term_minlen_(std::move(term_minlen)), term_dist_(std::move(term_dist)) {
    fresh();
  }

  // The parser and cache for a new guide: the current ones, or new ones once the current parser is large.
  std::pair<std::shared_ptr<Parser>, std::shared_ptr<CrossingCache>> generation() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (parser_->num_items() > PARSER_ITEMS_LIMIT) fresh();
    return {parser_, cache_};
  }

  // The vocabulary walk of lexer state q: the grammar's, else the vocabulary's of the same shape (walked by
  // another grammar), else walked now and offered to both.
  std::shared_ptr<const StateWalk> lexeme_walk(const Lexer* lx, int32_t q) {
    if (auto w = g_->walk(lx->shape[q])) return w;
    auto sw = std::make_shared<StateWalk>();
    const std::vector<int32_t> key = walk_key(*lx, q, sw->classes);
    if (!key.empty()) sw->walk = v_->lexeme_walks().get(key);
    if (!sw->walk) {
      sw->walk = walk_vocab(lx, q, sw->classes, key.empty());
      if (!key.empty()) v_->lexeme_walks().put(key, sw->walk);
    }
    return g_->offer_walk(lx->shape[q], std::move(sw));
  }

  Grammar& grammar() { return *g_; }
  const Vocab& vocab() const { return *v_; }
  // Earley sets the current parser holds (every guide of this generation shares them).
  int64_t num_sets() {
    std::lock_guard<std::mutex> lock(mutex_);
    return parser_->num_sets();
  }
  const std::vector<int64_t>& term_dist(int32_t t) const { return term_dist_[t]; }

 private:
  // Walk the vocabulary trie from lexer state q: the tokens that stay inside the lexeme, and the exits with their
  // class numbers (`classes` maps numbers to lexeme classes, and is filled here with them as they are when
  // `own_classes`, for a shape too large to share).
  //
  // Where most first bytes lead q to the state m that they lead m itself to (a string's contents: after any
  // plain byte, inside the string), the trie below those bytes walks alike from q and from m, so q's walk is
  // m's (shared by every grammar) with the subtrees of the other first bytes walked again: a key among literal
  // keys costs the tokens that start like a key, not the vocabulary.
  std::shared_ptr<const LexemeWalk> walk_vocab(const Lexer* lx, int32_t q, std::vector<int32_t>& classes,
                                               bool own_classes) {
    std::unordered_map<int32_t, int32_t> number;
    for (size_t n = 0; n < classes.size(); ++n) number.emplace(classes[n], static_cast<int32_t>(n));
    auto class_number = [&](int32_t c) {
      if (c < 0) return c;
      auto [it, fresh] = number.emplace(c, static_cast<int32_t>(classes.size()));
      if (fresh) {
        if (!own_classes) throw std::logic_error("a lexeme class outside its walk's shape");
        classes.push_back(c);
      }
      return it->second;
    };
    const Vocab& v = *v_;
    auto w = std::make_shared<LexemeWalk>();
    std::vector<uint32_t> bits(static_cast<size_t>(v.words()), 0);
    std::vector<uint8_t> again;  // the first bytes whose subtrees are walked from q
    const int32_t m = patch_base(lx, q, again);
    if (m != 0) {
      auto base = lexeme_walk(lx, m);
      const LexemeWalk& bw = *base->walk;
      if (!bw.inside.empty()) std::copy(bw.inside.begin(), bw.inside.end(), bits.begin());
      std::vector<uint8_t> differs(256, 0);
      for (uint8_t b : again) {
        const int32_t r = v.root_[b];
        differs[b] = 1;
        for (int32_t j = v.tok_ptr_[r]; j < v.tok_ptr_[v.node_end_[r]]; ++j) bits[v.tok_[j] >> 5] &= ~(1u << (v.tok_[j] & 31));
      }
      for (size_t i = 0; i < bw.exit_node.size(); ++i) {
        const int32_t k = bw.exit_node[i];
        if (differs[v.bytes_[v.off_[v.tok_[v.tok_ptr_[k]]]]]) continue;  // the exit's first byte (a token below it)
        w->exit_node.push_back(k);
        w->exit_class.push_back(class_number(base->lexeme_class(bw.exit_class[i])));
      }
    } else {
      for (int b = 0; b < 256; ++b)
        if (v.root_[b] >= 0) again.push_back(static_cast<uint8_t>(b));
    }
    std::vector<int32_t> stack(static_cast<size_t>(v.max_len_) + 1, 0);
    stack[0] = q;
    for (uint8_t first : again) {
      const int32_t r = v.root_[first];
      for (int32_t k = r; k < v.node_end_[r];) {
        const int32_t d = v.node_depth_[k];
        const int32_t p = stack[d - 1];
        const int32_t t = lx->step(p, v.node_byte_[k]);
        if (t == 0) {
          if (lx->accept_class[p] != NO_CLASS) {
            w->exit_node.push_back(k);
            w->exit_class.push_back(class_number(lx->accept_class[p]));
          }
          k = v.node_end_[k];
          continue;
        }
        // a subtree whose bytes all keep the state in place is taken whole (a string's contents, an
        // identifier's letters): all its tokens stay inside, none exits
        const bool whole = v.node_end_[k] > k + 1 && lx->keeps(t, v.bytes_below_[k]);
        const int32_t last = whole ? v.tok_ptr_[v.node_end_[k]] : v.tok_ptr_[k + 1];
        for (int32_t j = v.tok_ptr_[k]; j < last; ++j) bits[v.tok_[j] >> 5] |= 1u << (v.tok_[j] & 31);
        if (whole) {
          k = v.node_end_[k];
          continue;
        }
        stack[d] = t;
        ++k;
      }
    }
    if (std::any_of(bits.begin(), bits.end(), [](uint32_t x) { return x != 0; })) w->inside = std::move(bits);
    group_exits(*w);
    return w;
  }

  // The state whose walk q's can be patched from (see walk_vocab), or 0: the state m that the first bytes of at
  // least half of the vocabulary's tokens lead q to, where those bytes lead m to itself, and the first bytes
  // that walk differently from q than from m start at most a quarter of the tokens. A base never has a base of
  // its own (its other states take under half of the tokens), so patching never chains. With a base, `differ`
  // gets those first bytes (the subtrees to walk again); without one it is left empty.
  int32_t patch_base(const Lexer* lx, int32_t q, std::vector<uint8_t>& differ) const {
    const Vocab& v = *v_;
    std::unordered_map<int32_t, int64_t> weight;
    int64_t total = 0;
    for (int b = 0; b < 256; ++b) {
      const int32_t r = v.root_[b];
      if (r < 0) continue;
      const int64_t tokens = v.tok_ptr_[v.node_end_[r]] - v.tok_ptr_[r];
      total += tokens;
      const int32_t t = lx->step(q, static_cast<uint8_t>(b));
      if (t != 0 && t != q && lx->step(t, static_cast<uint8_t>(b)) == t) weight[t] += tokens;
    }
    int32_t m = 0;
    int64_t best = 0;
    for (const auto& [t, wt] : weight)
      if (wt > best || (wt == best && t < m)) {
        best = wt;
        m = t;
      }
    if (m == 0 || best * 2 < total) return 0;
    int64_t other = 0;
    for (int b = 0; b < 256; ++b) {
      const int32_t r = v.root_[b];
      if (r < 0 || !differs_below(lx, q, m, static_cast<uint8_t>(b))) continue;
      other += v.tok_ptr_[v.node_end_[r]] - v.tok_ptr_[r];
      differ.push_back(static_cast<uint8_t>(b));
    }
    if (other * 4 <= total) return m;
    differ.clear();
    return 0;
  }

  // Whether the subtree of first byte b may walk differently from q than from m: their states after b differ,
  // or b ends the lexeme in both and the lexemes differ.
  static bool differs_below(const Lexer* lx, int32_t q, int32_t m, uint8_t b) {
    const int32_t tq = lx->step(q, b), tm = lx->step(m, b);
    if (tq != tm) return true;
    return tq == 0 && lx->accept_class[q] != lx->accept_class[m];
  }

  // Sort a walk's exits by (class, first byte of the next lexeme, node) and mark their runs, for cross().
  void group_exits(LexemeWalk& walk) const {
    const Vocab& v = *v_;
    LexemeWalk* w = &walk;
    std::vector<size_t> order(w->exit_node.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const int32_t ca = w->exit_class[a], cb = w->exit_class[b];
      if (ca != cb) return ca < cb;
      const uint8_t ba = v.node_byte_[w->exit_node[a]], bb = v.node_byte_[w->exit_node[b]];
      if (ba != bb) return ba < bb;
      return w->exit_node[a] < w->exit_node[b];
    });
    std::vector<int32_t> nodes(order.size()), exit_classes(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      nodes[i] = w->exit_node[order[i]];
      exit_classes[i] = w->exit_class[order[i]];
    }
    w->exit_node = std::move(nodes);
    w->exit_class = std::move(exit_classes);
    w->run_begin.clear();
    for (size_t i = 0; i < w->exit_node.size(); ++i)
      if (i == 0 || w->exit_class[i] != w->exit_class[i - 1] ||
          v.node_byte_[w->exit_node[i]] != v.node_byte_[w->exit_node[i - 1]])
        w->run_begin.push_back(static_cast<int32_t>(i));
    w->run_begin.push_back(static_cast<int32_t>(w->exit_node.size()));
  }

  void fresh() {
    parser_ = std::make_shared<Parser>(g_, term_minlen_);
    cache_ = std::make_shared<CrossingCache>();
  }

  std::shared_ptr<Grammar> g_;
  std::shared_ptr<Vocab> v_;
  std::vector<int64_t> term_minlen_;
  std::vector<std::vector<int64_t>> term_dist_;
  std::mutex mutex_;
  std::shared_ptr<Parser> parser_;
  std::shared_ptr<CrossingCache> cache_;
};

// Where a sequence is: the Earley set before the lexeme in progress and the lexer state inside it.
struct Frame {
  int32_t set = DEAD_SET;
  int32_t termset = -1;
  const Lexer* lx = nullptr;
  int32_t q = 0;
  bool accepting = false;  // the set completes the parse (with no lexeme in progress)
  bool alive() const { return set != DEAD_SET; }
};

// A sequence's memo of the parser's steps, (set, lexeme class) -> frame: per set, the chain of its answers (a
// set is asked about a few classes), kept in blocks that never move (a hash table's rehash of thousands of
// entries was one slow step); cleared when AFTER_MEMO_SIZE answers are held.
class FrameMemo {
 public:
  const Frame* find(int32_t set, int32_t cls) const {
    if (static_cast<size_t>(set) >= head_.size()) return nullptr;
    for (int32_t e = head_[set]; e >= 0; e = answers_[e].next)
      if (answers_[e].cls == cls) return &answers_[e].frame;
    return nullptr;
  }
  void put(int32_t set, int32_t cls, const Frame& f) {
    if (answers_.size() >= static_cast<int64_t>(AFTER_MEMO_SIZE)) {
      std::fill(head_.begin(), head_.end(), -1);
      answers_.clear();
    }
    if (static_cast<size_t>(set) >= head_.size())
      head_.resize(std::max(static_cast<size_t>(set) + 1, head_.size() * 2), -1);
    head_[set] = static_cast<int32_t>(answers_.push_back(Answer{cls, head_[set], f}));
  }

 private:
  struct Answer {
    int32_t cls = 0, next = -1;
    Frame frame;
  };
  std::vector<int32_t> head_;  // per set id, its newest answer (or -1)
  BlockVector<Answer> answers_;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<Compiled> c) : c_(std::move(c)) {
    std::tie(parser_, cache_) = c_->generation();
    reset();
  }

  void reset() {
    const SetInfo s = parser_->initial();
    hist_.assign(1, frame_of(s));
    ended_.assign(1, 0);
  }

  int64_t num_tokens() const { return static_cast<int64_t>(hist_.size()) - 1; }
  int32_t words() const { return c_->vocab().words(); }
  bool is_terminated() const { return ended_.back() != 0; }
  bool can_end() { return !is_terminated() && eos_allowed(hist_.back()); }
  // Nothing but the end may follow: no byte can come next (never true while ignored text may follow).
  bool is_finished() {
    if (is_terminated()) return true;
    const Frame& f = hist_.back();
    if (f.lx->width[f.q] != 0) return false;
    return can_end();
  }

  // Take token t: false (and nothing changes) when the grammar does not allow it here.
  bool accept_token(int32_t t) {
    if (is_terminated() || t < 0 || t >= c_->vocab().size()) return false;
    for (int32_t e : c_->vocab().eos())
      if (e == t) {
        if (!eos_allowed(hist_.back())) return false;
        hist_.push_back(hist_.back());
        ended_.push_back(1);
        return true;
      }
    const Vocab& v = c_->vocab();
    const int64_t lo = v.off_[t], hi = v.off_[t + 1];
    if (lo == hi) return false;
    Frame f = hist_.back();
    for (int64_t k = lo; k < hi; ++k) {
      f = step(f, v.bytes_[k]);
      if (!f.alive()) return false;
    }
    hist_.push_back(f);
    ended_.push_back(0);
    return true;
  }

  // Whether token t is allowed now (nothing changes).
  bool accepts(int32_t t) {
    if (is_terminated() || t < 0 || t >= c_->vocab().size()) return false;
    const Vocab& v = c_->vocab();
    if (std::find(v.eos().begin(), v.eos().end(), t) != v.eos().end()) return eos_allowed(hist_.back());
    const int64_t lo = v.off_[t], hi = v.off_[t + 1];
    if (lo == hi) return false;
    Frame f = hist_.back();
    for (int64_t k = lo; k < hi && f.alive(); ++k) f = step(f, v.bytes_[k]);
    return f.alive();
  }

  // Whether some longer token that starts with token t's bytes is allowed now (then a forced stretch that ends
  // with t is left for the model to write, merged with what follows).
  bool runs_on(int32_t t) {
    const Vocab& v = c_->vocab();
    if (is_terminated() || t < 0 || t >= v.size() || v.off_[t] == v.off_[t + 1]) return false;
    int32_t node = -1;
    Frame f = hist_.back();
    for (int64_t k = v.off_[t]; k < v.off_[t + 1]; ++k) {
      const uint8_t b = v.bytes_[k];
      int32_t child = node < 0 ? v.root_[b] : -1;
      if (node >= 0)
        for (int32_t c = node + 1; c < v.node_end_[node]; c = v.node_end_[c])
          if (v.node_byte_[c] == b) {
            child = c;
            break;
          }
      if (child < 0) return false;
      node = child;
      f = step(f, b);
      if (!f.alive()) return false;
    }
    std::vector<Frame> stack(static_cast<size_t>(v.max_len_) + 1);
    stack[v.node_depth_[node]] = f;
    for (int32_t k = node + 1; k < v.node_end_[node];) {
      const Frame nf = step(stack[v.node_depth_[k] - 1], v.node_byte_[k]);
      if (!nf.alive()) {
        k = v.node_end_[k];
        continue;
      }
      if (v.tok_ptr_[k + 1] > v.tok_ptr_[k]) return true;
      stack[v.node_depth_[k]] = nf;
      ++k;
    }
    return false;
  }

  // The bytes that must come next whatever the model says (one way on, and the text may not end yet), at most
  // `limit`: the stretch a decoder may append without asking the model (jump-forward).
  std::string forced_bytes(int64_t limit) {
    std::string out;
    if (is_terminated()) return out;
    Frame f = hist_.back();
    while (static_cast<int64_t>(out.size()) < limit && !eos_allowed(f)) {
      int only = -1;
      Frame next;
      for (int b = 0; b < 256; ++b) {
        const Frame nf = step(f, static_cast<uint8_t>(b));
        if (!nf.alive()) continue;
        if (only >= 0) return out;
        only = b;
        next = nf;
      }
      if (only < 0) return out;
      out.push_back(static_cast<char>(only));
      f = next;
    }
    return out;
  }

  // Take raw bytes as one step: how many are accepted before the first that is not. Only when all are does the
  // state move (then rollback(1) undoes them).
  int64_t accept_bytes(const uint8_t* data, int64_t n) {
    if (is_terminated()) return 0;
    Frame f = hist_.back();
    for (int64_t k = 0; k < n; ++k) {
      const Frame nf = step(f, data[k]);
      if (!nf.alive()) return k;
      f = nf;
    }
    hist_.push_back(f);
    ended_.push_back(0);
    return n;
  }

  void rollback(int64_t n) {
    if (n < 0 || n > num_tokens()) throw std::out_of_range("cannot roll back " + std::to_string(n) + " tokens");
    hist_.resize(hist_.size() - static_cast<size_t>(n));
    ended_.resize(hist_.size());
  }

  // The packed mask of the tokens allowed next into out[0 .. words).
  void fill(int32_t* out) {
    const Vocab& v = c_->vocab();
    const int32_t W = v.words();
    if (is_terminated()) {
      std::memset(out, 0, sizeof(int32_t) * W);
      return;
    }
    const Frame& f = hist_.back();
    auto state_walk = c_->lexeme_walk(f.lx, f.q);
    const LexemeWalk* walk = state_walk->walk.get();
    if (walk->inside.empty())
      std::memset(out, 0, sizeof(int32_t) * W);
    else
      std::memcpy(out, walk->inside.data(), sizeof(int32_t) * W);
    auto* bits = reinterpret_cast<uint32_t*>(out);
    if (!walk->exit_node.empty()) {
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(f.set)) << 32) | static_cast<uint32_t>(f.q);
      auto crossing = cache_->get(key);
      if (!crossing) {
        auto fresh = std::make_shared<std::vector<int32_t>>();
        cross(f, *state_walk, *fresh);
        crossing = fresh;
        cache_->put(key, crossing);
      }
      for (int32_t t : *crossing) bits[t >> 5] |= 1u << (t & 31);
    }
    if (eos_allowed(f))
      for (int32_t e : v.eos()) bits[e >> 5] |= 1u << (e & 31);
  }

  // Fewest bytes from here to a complete text (0 when it may end now); UNREACHABLE never happens for a live
  // sequence of a normalized grammar.
  int64_t distance() {
    if (is_terminated()) return 0;
    return distance_of(hist_.back());
  }

  // Of the candidate tokens, those after which the text is closest to complete (EOS, where allowed, first).
  std::vector<int32_t> steer(const int32_t* ids, int64_t n) {
    std::vector<int32_t> best;
    int64_t best_d = UNREACHABLE + 1;
    const Vocab& v = c_->vocab();
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = ids[i];
      if (t < 0 || t >= v.size()) continue;
      int64_t d;
      if (std::find(v.eos().begin(), v.eos().end(), t) != v.eos().end()) {
        if (!eos_allowed(hist_.back())) continue;
        d = -1;
      } else {
        Frame f = hist_.back();
        const int64_t lo = v.off_[t], hi = v.off_[t + 1];
        if (lo == hi) continue;
        for (int64_t k = lo; k < hi && f.alive(); ++k) f = step(f, v.bytes_[k]);
        if (!f.alive()) continue;
        d = distance_of(f);
      }
      if (d < best_d) {
        best_d = d;
        best.clear();
      }
      if (d == best_d) best.push_back(t);
    }
    return best;
  }

 private:
  Frame frame_of(const SetInfo& s) {
    if (s.id == DEAD_SET) return Frame{};
    return Frame{s.id, s.termset, c_->grammar().lexer(s.termset), 1, s.accepting};
  }

  // The frame after the lexeme of class `cls` ends in f: the parser moves (unless the lexeme is ignored) and
  // the next lexeme starts.
  Frame after_lexeme(const Frame& f, int32_t cls) {
    if (cls == IGNORE_CLASS) return Frame{f.set, f.termset, f.lx, 1, f.accepting};
    if (const Frame* got = after_.find(f.set, cls)) return *got;
    const Frame nf = frame_of(parser_->advance(f.set, cls));
    after_.put(f.set, cls, nf);
    return nf;
  }

  // A lexeme that cannot go on ends now.
  Frame settle(const Frame& f) {
    if (f.lx->width[f.q] != 0) return f;
    return after_lexeme(f, f.lx->accept_class[f.q]);
  }

  Frame step(const Frame& f, uint8_t b) {
    const int32_t q2 = f.lx->step(f.q, b);
    if (q2 != 0) {
      Frame nf = f;
      nf.q = q2;
      return settle(nf);
    }
    const int32_t cls = f.lx->accept_class[f.q];
    if (cls == NO_CLASS) return Frame{};
    Frame nf = after_lexeme(f, cls);
    if (!nf.alive()) return nf;
    const int32_t q3 = nf.lx->step(1, b);
    if (q3 == 0) return Frame{};
    nf.q = q3;
    return settle(nf);
  }

  bool eos_allowed(const Frame& f) {
    if (f.q == 1) return f.accepting;
    const int32_t cls = f.lx->accept_class[f.q];
    if (cls == NO_CLASS) return false;
    if (cls == IGNORE_CLASS) return f.accepting;
    return after_lexeme(f, cls).accepting;
  }

  // The tokens that cross a lexeme boundary from f: from each exit of its walk, the rest of the trie below
  // the exit node, walked through lexer and parser (a stack of frames by depth, no recursion).
  void cross(const Frame& f, const StateWalk& sw, std::vector<int32_t>& out) {
    const Vocab& v = c_->vocab();
    const LexemeWalk& walk = *sw.walk;
    std::vector<Frame>& stack = stack_;
    stack.resize(static_cast<size_t>(v.max_len_) + 1);
    // The exits come in runs of one (lexeme class, byte that starts the next lexeme): a run shares the parser's
    // step and the next lexer's first byte, so a run whose byte the next lexer refuses costs one check.
    Frame after;
    int32_t cls = INT32_MIN;  // no class yet (IGNORE_CLASS and NO_CLASS are negative too)
    for (size_t r = 0; r + 1 < walk.run_begin.size(); ++r) {
      const int32_t lo = walk.run_begin[r], hi = walk.run_begin[r + 1];
      if (walk.exit_class[lo] != cls) {
        cls = walk.exit_class[lo];
        after = after_lexeme(f, sw.lexeme_class(cls));
      }
      if (!after.alive()) continue;
      const int32_t q = after.lx->step(1, v.node_byte_[walk.exit_node[lo]]);
      if (q == 0) continue;
      Frame first = after;
      first.q = q;
      first = settle(first);
      if (!first.alive()) continue;
      for (int32_t i = lo; i < hi; ++i) {
        const int32_t k0 = walk.exit_node[i];
        out.insert(out.end(), v.tok_.begin() + v.tok_ptr_[k0], v.tok_.begin() + v.tok_ptr_[k0 + 1]);
        stack[v.node_depth_[k0]] = first;
        const int32_t end = v.node_end_[k0];
        for (int32_t k = k0 + 1; k < end;) {
          const int32_t d = v.node_depth_[k];
          const Frame nf = step(stack[d - 1], v.node_byte_[k]);
          if (!nf.alive()) {
            k = v.node_end_[k];
            continue;
          }
          const bool whole = v.node_end_[k] > k + 1 && nf.lx->keeps(nf.q, v.bytes_below_[k]);
          const int32_t last = whole ? v.tok_ptr_[v.node_end_[k]] : v.tok_ptr_[k + 1];
          out.insert(out.end(), v.tok_.begin() + v.tok_ptr_[k], v.tok_.begin() + last);
          if (whole) {
            k = v.node_end_[k];
            continue;
          }
          stack[d] = nf;
          ++k;
        }
      }
    }
  }

  int64_t distance_of(const Frame& f) {
    if (f.q == 1) return parser_->distance(f.set, nullptr);
    const std::vector<int32_t>& terms = f.lx->terminals;
    const int32_t T = c_->grammar().n_terminals();
    std::vector<int64_t> rest(static_cast<size_t>(T), UNREACHABLE);
    int64_t ignored = UNREACHABLE;
    bool any = false;
    for (int32_t j = f.lx->tuple_ptr[f.q]; j < f.lx->tuple_ptr[f.q + 1]; ++j) {
      const int32_t i = f.lx->tuple_term[j], s = f.lx->tuple_state[j];
      const int64_t d = c_->term_dist(terms[i])[s];
      if (c_->grammar().is_ignored(terms[i]))
        ignored = std::min(ignored, d);
      else {
        rest[terms[i]] = d;
        any = true;
      }
    }
    int64_t best = UNREACHABLE;
    if (any) best = parser_->distance(f.set, &rest);
    if (ignored < UNREACHABLE) best = std::min(best, ignored + parser_->distance(f.set, nullptr));
    return best;
  }

  std::shared_ptr<Compiled> c_;
  std::shared_ptr<Parser> parser_;
  std::shared_ptr<CrossingCache> cache_;
  std::vector<Frame> hist_;
  std::vector<uint8_t> ended_;
  // this sequence's own memo of the parser's steps (set, lexeme class) -> frame: the shared parser's answer
  // costs a lock and a lookup, and a mask's walk asks the same few questions at thousands of trie nodes
  FrameMemo after_;
  std::vector<Frame> stack_;  // the crossing walk's frames by depth, kept between fills
};

}  // namespace tooldec::cfg
