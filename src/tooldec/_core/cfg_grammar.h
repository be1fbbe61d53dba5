// A context-free grammar compiled for guidance: rules as dotted positions (for the Earley parser), the
// terminals' byte DFAs, and per set of terminals the parser may accept next (a "termset") a lexer: the product
// of those terminals' DFAs (plus the ignored ones), built on first use, with each accepting state resolved to
// the terminals it ends (priorities, literals before patterns). Per lexer-state shape (its live terminals and
// their DFA states, alike across termsets) a lexeme walk of the vocabulary trie is kept: the tokens that stay
// inside the lexeme, and the trie nodes where a lexeme ends and the next begins (the exits), which the matcher
// finishes through the parser. The walk itself is the vocabulary's, shared by every grammar with a state of the
// same byte-level shape (walk_key), its exit classes mapped to this grammar's.
//
// Everything here is immutable after construction except the lexers and walks, which are built lazily under a
// mutex and never freed while the grammar lives (their number is bounded by the grammar, not by the input).
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "vocab.h"

namespace tooldec::cfg {

// A grammar the engine cannot guide within its bounds (too many lexer states, Earley items, ...).
struct GrammarTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int32_t IGNORE_CLASS = -2;  // a lexeme of ignored terminals only: the parser does not move
constexpr int32_t NO_CLASS = -1;      // a lexer state that ends no lexeme
constexpr int32_t MAX_LEXER_STATES = 1 << 16;

// One terminal's byte DFA as a dense 256-wide table (state 0 dead).
struct TerminalDfa {
  std::vector<uint8_t> classes;  // 256: bytes of one class lead alike from every state
  std::vector<uint8_t> accepting;
  // the live transitions by class: state q's are out_class/out_to[out_ptr[q] .. out_ptr[q + 1])
  std::vector<int32_t> out_ptr, out_class, out_to;
  int32_t start = 1, n = 0, n_classes = 0;
};

// The lexer of one termset: the product of its terminals' DFAs, dense over bytes. State 0 is dead, 1 the start.
struct Lexer {
  std::vector<int32_t> terminals;    // the termset (expected terminals and the ignored ones), ascending
  std::vector<int32_t> trans;        // n * 256
  std::vector<int32_t> accept_class;  // per state: the class of terminals a lexeme ending here is, or NO_CLASS
  std::vector<int32_t> width;        // per state: live bytes
  // per state, its live terminals (indexes into `terminals`) and their DFA states:
  // tuple_term/tuple_state[tuple_ptr[q] .. tuple_ptr[q + 1])
  std::vector<int32_t> tuple_ptr, tuple_term, tuple_state;
  std::vector<std::array<uint64_t, 4>> loop;  // per state: the bytes that lead back to it
  std::vector<int32_t> shape;        // per state: the id of its live (terminal, DFA state) pairs, grammar-wide
  int32_t n = 0;
  int32_t live(int32_t q) const { return tuple_ptr[q + 1] - tuple_ptr[q]; }
  int32_t step(int32_t q, uint8_t b) const { return trans[static_cast<size_t>(q) * 256 + b]; }
  // Whether every byte in `bytes` keeps state q in place (then a trie subtree of those bytes stays in q).
  bool keeps(int32_t q, const std::array<uint64_t, 4>& bytes) const {
    const auto& l = loop[q];
    return ((bytes[0] & ~l[0]) | (bytes[1] & ~l[1]) | (bytes[2] & ~l[2]) | (bytes[3] & ~l[3])) == 0;
  }
};

// A lexer state's walk: the vocabulary's walk of its shape, and the grammar's lexeme class of each class number
// the walk's exits use (classes[n]; negative numbers, IGNORE_CLASS, are the same in both).
struct StateWalk {
  std::shared_ptr<const LexemeWalk> walk;
  std::vector<int32_t> classes;
  int32_t lexeme_class(int32_t n) const { return n < 0 ? n : classes[n]; }
};

// The shape of lexer state q as the vocabulary sees it, comparable across lexers and grammars: its reachable
// states breadth first (bytes ascending), each as its class number (NO_CLASS, IGNORE_CLASS, or numbered by first
// appearance) and its transitions as runs (first byte, state number; 0 dead), then 256. `classes` gets the lexeme
// class of each number. Empty when more than MAX_SHARED_LEXEME_STATES states are reachable.
inline std::vector<int32_t> walk_key(const Lexer& lx, int32_t q, std::vector<int32_t>& classes) {
  std::vector<int32_t> key, queue{q}, number(static_cast<size_t>(lx.n), 0);
  std::unordered_map<int32_t, int32_t> class_number;
  number[q] = 1;
  classes.clear();
  for (size_t i = 0; i < queue.size(); ++i) {
    const int32_t s = queue[i];
    const int32_t c = lx.accept_class[s];
    if (c < 0) {
      key.push_back(c);
    } else {
      auto [it, fresh] = class_number.emplace(c, static_cast<int32_t>(classes.size()));
      if (fresh) classes.push_back(c);
      key.push_back(it->second);
    }
    int32_t last = -1;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = lx.step(s, static_cast<uint8_t>(b));
      if (t != 0 && number[t] == 0) {
        if (queue.size() >= MAX_SHARED_LEXEME_STATES) return {};
        queue.push_back(t);
        number[t] = static_cast<int32_t>(queue.size());
      }
      const int32_t id = t == 0 ? 0 : number[t];
      if (id != last) {
        key.push_back(b);
        key.push_back(id);
        last = id;
      }
    }
    key.push_back(256);
  }
  return key;
}

class Grammar {
 public:
  // rule_lhs[r], rule_rhs[rule_ptr[r] .. rule_ptr[r+1]) with symbols t >= 0 (terminal) or -(n + 1) (nonterminal).
  Grammar(std::vector<TerminalDfa> terminals, std::vector<int32_t> priority, std::vector<uint8_t> literal,
          std::vector<int32_t> ignore, int32_t n_nonterminals, const std::vector<int32_t>& rule_lhs,
          const std::vector<int64_t>& rule_ptr, const std::vector<int32_t>& rule_rhs, int32_t start,
          bool use_priorities, int64_t max_items)
      : terms_(std::move(terminals)),
        priority_(std::move(priority)),
        literal_(std::move(literal)),
        ignore_(std::move(ignore)),
        n_terms_(static_cast<int32_t>(terms_.size())),
        use_priorities_(use_priorities),
        max_items_(max_items) {
    n_nt_ = n_nonterminals + 1;  // plus the augmented start
    const int32_t aug = n_nonterminals;
    const int32_t n_rules = static_cast<int32_t>(rule_lhs.size());
    rules_of_.assign(n_nt_, {});
    auto add_rule = [&](int32_t lhs, const int32_t* rhs, int64_t len) {
      const int32_t r = static_cast<int32_t>(rule_first_.size());
      rule_first_.push_back(static_cast<int32_t>(pos_key_.size()));
      rule_lhs_.push_back(lhs);
      rules_of_[lhs].push_back(r);
      for (int64_t i = 0; i <= len; ++i) {
        pos_key_.push_back(i < len ? key_of(rhs[i]) : end_key());
        pos_rule_.push_back(r);
      }
    };
    for (int32_t r = 0; r < n_rules; ++r)
      add_rule(rule_lhs[r], rule_rhs.data() + rule_ptr[r], rule_ptr[r + 1] - rule_ptr[r]);
    const int32_t start_sym = -(start + 1);
    add_rule(aug, &start_sym, 1);
    aug_start_ = rule_first_.back();
    // nullable nonterminals, to a fixpoint
    nullable_.assign(n_nt_, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rule_first_.size(); ++r) {
        if (nullable_[rule_lhs_[r]]) continue;
        bool all = true;
        for (int32_t p = rule_first_[r]; pos_key_[p] != end_key(); ++p)
          if (pos_key_[p] < n_terms_ || !nullable_[pos_key_[p] - n_terms_]) {
            all = false;
            break;
          }
        if (all) {
          nullable_[rule_lhs_[r]] = 1;
          changed = true;
        }
      }
    }
    is_ignore_.assign(n_terms_, 0);
    for (int32_t t : ignore_) is_ignore_[t] = 1;
  }

  int32_t n_terminals() const { return n_terms_; }
  bool is_ignored(int32_t t) const { return is_ignore_[t] != 0; }
  int32_t end_key() const { return n_terms_ + n_nt_; }
  // The key of a symbol in the sort order of an Earley set: terminals, then nonterminals, then the end.
  int32_t key_of(int32_t sym) const { return sym >= 0 ? sym : n_terms_ + (-sym - 1); }
  int32_t pos_key(int32_t p) const { return pos_key_[p]; }
  int32_t pos_lhs(int32_t p) const { return rule_lhs_[pos_rule_[p]]; }
  const std::vector<int32_t>& rules_of(int32_t nt) const { return rules_of_[nt]; }
  int32_t rule_first(int32_t r) const { return rule_first_[r]; }
  bool nullable(int32_t nt) const { return nullable_[nt] != 0; }
  int32_t aug_start() const { return aug_start_; }
  int32_t n_nonterminals() const { return n_nt_; }
  int64_t max_items() const { return max_items_; }
  // The terminals of lexeme class c (pointer and count). A class's list never changes once made, and its
  // buffer stays where it is when the table of classes grows (a move keeps it), so the pointer stays valid.
  std::pair<const int32_t*, size_t> class_terms(int32_t c) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<int32_t>& terms = classes_.at(c);
    return {terms.data(), terms.size()};
  }

  // The id of a termset (expected terminals, ascending; its lexer adds the ignored ones), interned.
  int32_t termset(const std::vector<int32_t>& expected) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = termset_ids_.find(expected);
    if (it != termset_ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(lexers_.size());
    termset_ids_.emplace(expected, id);
    std::vector<int32_t> terms(expected);
    terms.insert(terms.end(), ignore_.begin(), ignore_.end());
    std::sort(terms.begin(), terms.end());
    terms.erase(std::unique(terms.begin(), terms.end()), terms.end());
    auto lx = std::make_unique<Lexer>();
    lx->terminals = std::move(terms);
    lexers_.push_back(std::move(lx));
    built_.push_back(0);
    return id;
  }

  // The lexer of termset `id`, built on first use. The pointer stays valid while the grammar lives.
  const Lexer* lexer(int32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    Lexer* lx = lexers_.at(id).get();
    if (!built_[id]) {
      build_lexer(*lx);
      built_[id] = 1;
    }
    return lx;
  }

  // The cached walk of a lexer state's shape (its live terminals and their states: states of different termsets
  // with one shape walk alike, such as a string's contents wherever a string may stand), or null (then the
  // caller computes and offers one).
  std::shared_ptr<const StateWalk> walk(int32_t shape) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = walks_.find(shape);
    return it == walks_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const StateWalk> offer_walk(int32_t shape, std::shared_ptr<const StateWalk> w) {
    std::lock_guard<std::mutex> lock(mutex_);
    return walks_.emplace(shape, std::move(w)).first->second;  // the first offered wins
  }

  int64_t num_lexers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(std::count(built_.begin(), built_.end(), 1));
  }
  int64_t num_walks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(walks_.size());
  }

 private:
  // The class a lexeme ending in a state with the live (terminal, DFA state) pairs `live` is: the accepting
  // terminals, kept to the highest priority and to the literals among them where there are any (Lark's rules);
  // IGNORE_CLASS when only ignored terminals end here; NO_CLASS when none does. Caller holds the mutex.
  int32_t resolve(const std::vector<int32_t>& live) {
    std::vector<int32_t> acc, kept;
    for (size_t j = 0; j < live.size(); j += 2)
      if (terms_[live[j]].accepting[live[j + 1]]) acc.push_back(live[j]);
    if (acc.empty()) return NO_CLASS;
    for (int32_t t : acc)
      if (!is_ignore_[t]) kept.push_back(t);
    if (kept.empty()) return IGNORE_CLASS;
    if (use_priorities_) {
      int32_t best = INT32_MIN;
      for (int32_t t : kept) best = std::max(best, priority_[t]);
      kept.erase(std::remove_if(kept.begin(), kept.end(), [&](int32_t t) { return priority_[t] != best; }), kept.end());
      if (std::any_of(kept.begin(), kept.end(), [&](int32_t t) { return literal_[t] != 0; }))
        kept.erase(std::remove_if(kept.begin(), kept.end(), [&](int32_t t) { return literal_[t] == 0; }), kept.end());
    }
    auto it = class_ids_.find(kept);
    if (it != class_ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(classes_.size());
    classes_.push_back(kept);
    class_ids_.emplace(std::move(kept), id);
    return id;
  }

  // The product of the termset's DFAs, breadth first over the reachable tuples, one transition per byte class
  // of the termset (bytes every terminal treats alike). A tuple is kept sparse, its live (terminal index, state)
  // pairs after a start mark, and a state's successors are gathered from its live terminals' live transitions
  // only: a state costs what can follow it, not termset size times classes (a termset of a thousand enum
  // literals has a thousand live terminals at its start and one or two a few bytes on). The mark makes the start
  // state distinct: no byte leads back to it, it means "no byte of a lexeme read yet". Caller holds the mutex.
  void build_lexer(Lexer& lx) {
    const std::vector<int32_t>& terms = lx.terminals;
    const size_t k = terms.size();
    std::vector<int32_t> cls(256, 0), reps;
    {
      // refine the byte partition by each terminal's classes; seen[old class * 256 + terminal's class] is the
      // new class (only the entries set are reset, so the table is allocated once per thread)
      thread_local std::vector<int32_t> seen(256 * 256, -1);  // all -1 between builds
      std::vector<int32_t> touched;
      touched.reserve(256);
      for (int32_t t : terms) {
        const uint8_t* tc = terms_[t].classes.data();
        int32_t next_id = 0;
        for (int b = 0; b < 256; ++b) {
          const int32_t key = cls[b] * 256 + tc[b];
          if (seen[key] < 0) {
            seen[key] = next_id++;
            touched.push_back(key);
          }
          cls[b] = seen[key];
        }
        for (int32_t key : touched) seen[key] = -1;
        touched.clear();
      }
      for (int b = 0; b < 256; ++b) {
        if (cls[b] >= static_cast<int32_t>(reps.size())) reps.resize(cls[b] + 1, -1);
        if (reps[cls[b]] < 0) reps[cls[b]] = b;
      }
    }
    const size_t n_cls = reps.size();
    // per terminal (index i), its classes' lexer classes: of_ptr[i] + its class c -> lexer classes
    // of_cls[of_at[of_ptr[i] + c] .. of_at[of_ptr[i] + c + 1])
    std::vector<int32_t> of_ptr(k + 1, 0), of_at, of_cls;
    for (size_t i = 0; i < k; ++i) of_ptr[i + 1] = of_ptr[i] + terms_[terms[i]].n_classes;
    of_at.assign(static_cast<size_t>(of_ptr[k]) + 1, 0);
    for (size_t i = 0; i < k; ++i)
      for (size_t c = 0; c < n_cls; ++c) ++of_at[of_ptr[i] + terms_[terms[i]].classes[reps[c]] + 1];
    for (size_t j = 1; j < of_at.size(); ++j) of_at[j] += of_at[j - 1];
    of_cls.assign(static_cast<size_t>(of_at.back()), 0);
    {
      std::vector<int32_t> fill(of_at.begin(), of_at.end() - 1);
      for (size_t i = 0; i < k; ++i)
        for (size_t c = 0; c < n_cls; ++c)
          of_cls[fill[of_ptr[i] + terms_[terms[i]].classes[reps[c]]]++] = static_cast<int32_t>(c);
    }
    std::unordered_map<std::vector<int32_t>, int32_t, SigHash> ids;
    std::vector<std::vector<int32_t>> order;
    std::vector<int32_t> dead{0}, start{1};
    for (size_t i = 0; i < k; ++i) {
      start.push_back(static_cast<int32_t>(i));
      start.push_back(terms_[terms[i]].start);
    }
    ids.emplace(dead, 0);
    order.push_back(dead);
    ids.emplace(start, 1);
    order.push_back(start);
    lx.trans.assign(2 * 256, 0);
    std::vector<std::vector<int32_t>> next(n_cls);
    std::vector<int32_t> row(n_cls), used;
    for (size_t s = 1; s < order.size(); ++s) {
      for (size_t j = 1; j < order[s].size(); j += 2) {  // each live terminal's live classes, in terminal order
        const int32_t i = order[s][j];
        const TerminalDfa& d = terms_[terms[i]];
        const int32_t q = order[s][j + 1];
        for (int32_t o = d.out_ptr[q]; o < d.out_ptr[q + 1]; ++o) {
          const int32_t at = of_ptr[i] + d.out_class[o];
          for (int32_t x = of_at[at]; x < of_at[at + 1]; ++x) {
            std::vector<int32_t>& nx = next[of_cls[x]];
            if (nx.empty()) {
              used.push_back(of_cls[x]);
              nx.push_back(0);
            }
            nx.push_back(i);
            nx.push_back(d.out_to[o]);
          }
        }
      }
      std::fill(row.begin(), row.end(), 0);
      std::sort(used.begin(), used.end());  // new states numbered in class order, as a dense product would
      for (int32_t c : used) {
        auto [it, fresh] = ids.emplace(next[c], static_cast<int32_t>(order.size()));
        if (fresh) {
          if (it->second >= MAX_LEXER_STATES)
            throw GrammarTooLarge("the lexer of " + std::to_string(k) + " terminals would exceed " +
                                  std::to_string(MAX_LEXER_STATES) + " states");
          order.push_back(next[c]);
        }
        row[c] = it->second;
        next[c].clear();
      }
      used.clear();
      lx.trans.resize(order.size() * 256, 0);
      int32_t* dst = lx.trans.data() + s * 256;
      for (int b = 0; b < 256; ++b) dst[b] = row[cls[b]];
    }
    lx.n = static_cast<int32_t>(order.size());
    lx.accept_class.assign(lx.n, NO_CLASS);
    lx.width.assign(lx.n, 0);
    lx.tuple_ptr.assign(static_cast<size_t>(lx.n) + 1, 0);
    lx.tuple_term.clear();
    lx.tuple_state.clear();
    lx.loop.assign(lx.n, {0, 0, 0, 0});
    lx.shape.assign(lx.n, -1);
    std::vector<int32_t> live;
    for (int32_t s = 1; s < lx.n; ++s) {
      const std::vector<int32_t>& cur = order[s];
      live.clear();
      for (size_t j = 1; j < cur.size(); j += 2) {
        lx.tuple_term.push_back(cur[j]);
        lx.tuple_state.push_back(cur[j + 1]);
        live.push_back(terms[cur[j]]);
        live.push_back(cur[j + 1]);
      }
      lx.tuple_ptr[s + 1] = static_cast<int32_t>(lx.tuple_term.size());
      if (s > 1) lx.accept_class[s] = resolve(live);
      const int32_t* r = lx.trans.data() + static_cast<size_t>(s) * 256;
      for (int b = 0; b < 256; ++b) {
        lx.width[s] += r[b] != 0;
        if (r[b] == s) lx.loop[s][b >> 6] |= 1ULL << (b & 63);
      }
      lx.shape[s] = shape_ids_.emplace(live, static_cast<int32_t>(shape_ids_.size())).first->second;
    }
  }

  std::vector<TerminalDfa> terms_;
  std::vector<int32_t> priority_;
  std::vector<uint8_t> literal_;
  std::vector<int32_t> ignore_;
  std::vector<uint8_t> is_ignore_;
  int32_t n_terms_, n_nt_ = 0;
  bool use_priorities_;
  int64_t max_items_;
  // dotted positions: rule r's positions are rule_first_[r] .. (its end); pos_key_ is the symbol after the dot
  std::vector<int32_t> pos_key_, pos_rule_, rule_first_, rule_lhs_;
  std::vector<std::vector<int32_t>> rules_of_;
  std::vector<uint8_t> nullable_;
  int32_t aug_start_ = 0;

  mutable std::mutex mutex_;
  std::unordered_map<std::vector<int32_t>, int32_t, SigHash> termset_ids_;
  std::vector<std::unique_ptr<Lexer>> lexers_;
  std::vector<uint8_t> built_;
  std::map<std::vector<int32_t>, int32_t> class_ids_;
  std::vector<std::vector<int32_t>> classes_;
  std::unordered_map<std::vector<int32_t>, int32_t, SigHash> shape_ids_;
  std::unordered_map<int32_t, std::shared_ptr<const StateWalk>> walks_;
};

}  // namespace tooldec::cfg
