// A context-free grammar compiled for guidance: rules as dotted positions (for the Earley parser), the
// terminals' byte DFAs, and per set of terminals the parser may accept next (a "termset") a lexer: the product
// of those terminals' DFAs (plus the ignored ones), built on first use, with each accepting state resolved to
// the terminals it ends (priorities, literals before patterns). Per lexer-state shape (its live terminals and
// their DFA states, alike across termsets) a lexeme walk of the vocabulary trie is kept: the tokens that stay
// inside the lexeme, and the trie nodes where a lexeme ends and the next begins (the exits), which the matcher
// finishes through the parser.
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
#include <vector>

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
  std::vector<int32_t> trans;  // n * 256
  std::vector<uint8_t> classes;  // 256: bytes of one class lead alike from every state
  std::vector<uint8_t> accepting;
  int32_t start = 1, n = 0;
};

// The lexer of one termset: the product of its terminals' DFAs, dense over bytes. State 0 is dead, 1 the start.
struct Lexer {
  std::vector<int32_t> terminals;    // the termset (expected terminals and the ignored ones), ascending
  std::vector<int32_t> trans;        // n * 256
  std::vector<int32_t> accept_class;  // per state: the class of terminals a lexeme ending here is, or NO_CLASS
  std::vector<int32_t> width;        // per state: live bytes
  std::vector<int32_t> tuples;       // per state, each terminal's DFA state (n * terminals.size())
  std::vector<std::array<uint64_t, 4>> loop;  // per state: the bytes that lead back to it
  std::vector<int32_t> shape;        // per state: the id of its live (terminal, DFA state) pairs, grammar-wide
  int32_t n = 0;
  int32_t step(int32_t q, uint8_t b) const { return trans[static_cast<size_t>(q) * 256 + b]; }
  // Whether every byte in `bytes` keeps state q in place (then a trie subtree of those bytes stays in q).
  bool keeps(int32_t q, const std::array<uint64_t, 4>& bytes) const {
    const auto& l = loop[q];
    return ((bytes[0] & ~l[0]) | (bytes[1] & ~l[1]) | (bytes[2] & ~l[2]) | (bytes[3] & ~l[3])) == 0;
  }
};

// The vocabulary walk of one lexer state: tokens that stay inside the lexeme (packed), and the exits.
struct LexemeWalk {
  std::vector<uint32_t> inside;  // W words, or empty when no token stays inside
  // trie nodes whose byte starts the next lexeme, and the class of the lexeme ended there, sorted by (class,
  // node's byte, node)
  std::vector<int32_t> exit_node, exit_class;
  // the exits in runs of one (class, byte): run r is exit_node[run_begin[r] .. run_begin[r + 1])
  std::vector<int32_t> run_begin;
};

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
  // The terminals of lexeme class c (a copy: classes grow while lexers are built).
  std::vector<int32_t> class_terminals(int32_t c) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return classes_.at(c);
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
  std::shared_ptr<const LexemeWalk> walk(int32_t shape) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = walks_.find(shape);
    return it == walks_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const LexemeWalk> offer_walk(int32_t shape, std::shared_ptr<const LexemeWalk> w) {
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
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 1469598103934665603ULL;
      for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ULL;
      return static_cast<size_t>(h);
    }
  };

  // The class a lexeme ending in the component states `tuple` is: the accepting terminals, kept to the highest
  // priority and to the literals among them where there are any (Lark's rules); IGNORE_CLASS when only ignored
  // terminals end here; NO_CLASS when none does. Caller holds the mutex.
  int32_t resolve(const std::vector<int32_t>& terms, const std::vector<int32_t>& tuple) {
    std::vector<int32_t> acc, kept;
    for (size_t i = 0; i < terms.size(); ++i)
      if (tuple[i] != 0 && terms_[terms[i]].accepting[tuple[i]]) acc.push_back(terms[i]);
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
  // of the termset (bytes every terminal treats alike). A tuple's last entry marks the start, so that no byte
  // leads back to it: the start state means "no byte of a lexeme read yet". Caller holds the mutex.
  void build_lexer(Lexer& lx) {
    const std::vector<int32_t>& terms = lx.terminals;
    const size_t k = terms.size();
    std::vector<int32_t> cls(256, 0), reps;
    {
      int32_t n_cls = 1;
      for (int32_t t : terms) {  // refine by each terminal's classes
        std::unordered_map<int32_t, int32_t> split;
        int32_t next_id = 0;
        for (int b = 0; b < 256; ++b) {
          const int32_t key = cls[b] * 256 + terms_[t].classes[b];
          auto it = split.emplace(key, next_id).first;
          if (it->second == next_id) ++next_id;
          cls[b] = it->second;
        }
        n_cls = next_id;
      }
      reps.assign(n_cls, -1);
      for (int b = 0; b < 256; ++b)
        if (reps[cls[b]] < 0) reps[cls[b]] = b;
    }
    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    std::vector<std::vector<int32_t>> order;
    std::vector<int32_t> dead(k + 1, 0), start(k + 1, 1);
    for (size_t i = 0; i < k; ++i) start[i] = terms_[terms[i]].start;
    ids.emplace(dead, 0);
    order.push_back(dead);
    ids.emplace(start, 1);
    order.push_back(start);
    lx.trans.assign(2 * 256, 0);
    std::vector<int32_t> next(k + 1, 0), row(reps.size());
    for (size_t s = 1; s < order.size(); ++s) {
      for (size_t c = 0; c < reps.size(); ++c) {
        const int b = reps[c];
        bool any = false;
        for (size_t i = 0; i < k; ++i) {
          const int32_t q = order[s][i];
          next[i] = q == 0 ? 0 : terms_[terms[i]].trans[static_cast<size_t>(q) * 256 + b];
          any |= next[i] != 0;
        }
        row[c] = 0;
        if (!any) continue;
        auto [it, fresh] = ids.emplace(next, static_cast<int32_t>(order.size()));
        if (fresh) {
          if (it->second >= MAX_LEXER_STATES)
            throw GrammarTooLarge("the lexer of " + std::to_string(k) + " terminals would exceed " +
                                  std::to_string(MAX_LEXER_STATES) + " states");
          order.push_back(next);
          lx.trans.resize(order.size() * 256, 0);
        }
        row[c] = it->second;
      }
      int32_t* dst = lx.trans.data() + s * 256;
      for (int b = 0; b < 256; ++b) dst[b] = row[cls[b]];
    }
    lx.n = static_cast<int32_t>(order.size());
    lx.accept_class.assign(lx.n, NO_CLASS);
    lx.width.assign(lx.n, 0);
    lx.tuples.assign(static_cast<size_t>(lx.n) * k, 0);
    lx.loop.assign(lx.n, {0, 0, 0, 0});
    lx.shape.assign(lx.n, -1);
    std::vector<int32_t> live;
    for (int32_t s = 1; s < lx.n; ++s) {
      std::copy(order[s].begin(), order[s].begin() + static_cast<std::ptrdiff_t>(k), lx.tuples.begin() + static_cast<std::ptrdiff_t>(s * k));
      if (s > 1) lx.accept_class[s] = resolve(terms, order[s]);
      const int32_t* r = lx.trans.data() + static_cast<size_t>(s) * 256;
      for (int b = 0; b < 256; ++b) {
        lx.width[s] += r[b] != 0;
        if (r[b] == s) lx.loop[s][b >> 6] |= 1ULL << (b & 63);
      }
      live.clear();
      for (size_t i = 0; i < k; ++i)
        if (order[s][i] != 0) {
          live.push_back(terms[i]);
          live.push_back(order[s][i]);
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
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> termset_ids_;
  std::vector<std::unique_ptr<Lexer>> lexers_;
  std::vector<uint8_t> built_;
  std::map<std::vector<int32_t>, int32_t> class_ids_;
  std::vector<std::vector<int32_t>> classes_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> shape_ids_;
  std::unordered_map<int32_t, std::shared_ptr<const LexemeWalk>> walks_;
};

}  // namespace tooldec::cfg
