// The Earley parser over lexemes, with every Earley set interned: an item's origin is the id of an earlier set
// (or SELF, this set), so a set's content identifies the whole parse that matters for what may follow, and two
// sequences (or one sequence twice, in a repeated structure) that reach the same set share everything cached
// for it. A set keeps only its items that wait on a symbol (and whether the parse may end there): completed
// items are spent once the closure has made their completions. Sets are immutable once made, their items in
// an arena that never moves; a parse state is one set id. Scanning a lexeme is memoized per (set, lexeme
// class). Nullable symbols follow Aycock and Horspool: predicting a nullable symbol also moves the dot over it,
// so completions never look into the set being built.
//
// One Parser serves every guide of a compiled grammar and is safe across threads (one mutex). Its sets are kept
// while it lives; the owner starts a fresh Parser for new guides once this one holds too many items.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cfg_grammar.h"

namespace tooldec::cfg {

constexpr int32_t SELF = -1;
constexpr int32_t DEAD_SET = 0;
constexpr int64_t UNREACHABLE = std::numeric_limits<int64_t>::max() / 4;

struct Item {
  int32_t pos, origin;
};

// A set of packed items for one closure: open addressing, cleared in time proportional to what it holds, its
// memory kept from closure to closure (a closure makes tens of items; a node-based set allocated for each).
class ItemSet {
 public:
  void clear() {
    for (uint32_t u : used_) slots_[u] = EMPTY;
    used_.clear();
    if (slots_.empty()) slots_.assign(64, EMPTY);
  }
  // Adds x; false when it was there already.
  bool insert(uint64_t x) {
    if ((used_.size() + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t h = mix64(x) & mask;; h = (h + 1) & mask) {
      if (slots_[h] == x) return false;
      if (slots_[h] == EMPTY) {
        slots_[h] = x;
        used_.push_back(static_cast<uint32_t>(h));
        return true;
      }
    }
  }

 private:
  static constexpr uint64_t EMPTY = ~0ULL;  // no item packs to it: a position is never -1
  void grow() {
    std::vector<uint64_t> held;
    held.reserve(used_.size());
    for (uint32_t u : used_) held.push_back(slots_[u]);
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), EMPTY);
    used_.clear();
    for (uint64_t x : held) insert(x);
  }
  std::vector<uint64_t> slots_;
  std::vector<uint32_t> used_;
};

// One item of an interned set, with the key of the symbol after its dot (the set's sort order).
struct Entry {
  int32_t key, pos, origin;
};

struct EarleySet {
  const Entry* entries = nullptr;  // sorted by (key, pos, origin); in the parser's arena, never moved
  int32_t size = 0;
  int32_t termset = -1;
  int32_t scans = -1;  // the first of this set's memoized scans (a chain of Parser::Scan)
  bool accepting = false;
  uint64_t hash = 0;  // of its items, for the intern table
};

// What a step needs to know of a set.
struct SetInfo {
  int32_t id = DEAD_SET;
  int32_t termset = -1;
  bool accepting = false;
};

class Parser {
 public:
  Parser(std::shared_ptr<Grammar> g, std::vector<int64_t> term_minlen)
      : g_(std::move(g)), term_minlen_(std::move(term_minlen)) {
    sets_.push_back(EarleySet{});  // the dead set
    intern_.assign(1024, -1);
    nt_minlen_ = nonterminal_minlen();
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Item> kernel{{g_->aug_start(), SELF}};
    initial_ = close_and_intern(kernel);
  }

  SetInfo initial() {
    std::lock_guard<std::mutex> lock(mutex_);
    return info_locked(initial_);
  }

  // The set after scanning a lexeme of class `cls` (its terminals) in set `s`; DEAD_SET when none is expected.
  SetInfo advance(int32_t s, int32_t cls) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s < 0 || s >= sets_.size()) throw std::out_of_range("no Earley set " + std::to_string(s));
    for (int32_t e = sets_[s].scans; e >= 0; e = scans_[e].next)
      if (scans_[e].cls == cls) return info_locked(scans_[e].to);
    const auto [terms, n_terms] = g_->class_terms(cls);
    const EarleySet& from = sets_[s];
    std::vector<Item>& kernel = kernel_;
    kernel.clear();
    for (size_t i = 0; i < n_terms; ++i) {
      const auto [lo, hi] = with_key(from, terms[i]);
      for (const Entry* k = lo; k != hi; ++k) kernel.push_back({k->pos + 1, k->origin == SELF ? s : k->origin});
    }
    const int32_t id = kernel.empty() ? DEAD_SET : close_and_intern(kernel);
    EarleySet& at = sets_[s];
    at.scans = static_cast<int32_t>(scans_.push_back(Scan{cls, id, at.scans}));
    return info_locked(id);
  }

  // Fewest bytes that complete a parse from set s, given that the lexeme in progress is a terminal t that
  // needs `t_rest[t]` more bytes (UNREACHABLE for terminals not in progress); with no lexeme in progress pass
  // nullptr: then every expected terminal's whole minimal length counts.
  int64_t distance(int32_t s, const std::vector<int64_t>* t_rest) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s < 0 || s >= sets_.size()) throw std::out_of_range("no Earley set " + std::to_string(s));
    while (static_cast<int64_t>(up_.size()) <= s) up_.push_back(up_table(static_cast<int32_t>(up_.size())));
    const EarleySet& set = sets_[s];
    const int32_t nt = g_->n_terminals();
    int64_t best = set.accepting && t_rest == nullptr ? 0 : UNREACHABLE;
    for (int32_t i = 0; i < set.size; ++i) {
      const Entry& it = set.entries[i];
      const int32_t k = it.key;
      if (t_rest != nullptr && k >= nt) break;  // only items waiting on the lexeme's terminal move
      if (t_rest != nullptr && (*t_rest)[k] >= UNREACHABLE) continue;
      const int64_t first = t_rest != nullptr ? (*t_rest)[k] : 0;
      const int32_t from = t_rest != nullptr ? it.pos + 1 : it.pos;
      const int64_t up = up_of(it.origin == SELF ? s : it.origin, g_->pos_lhs(it.pos));
      best = std::min(best, sat(first + rest(from) + up));
    }
    return best;
  }

  int64_t num_sets() {
    std::lock_guard<std::mutex> lock(mutex_);
    return sets_.size();
  }
  int64_t num_items() {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_;
  }

 private:
  // A memoized scan: set --lexeme of class cls--> set `to`; `next` is the set's next scan (or -1).
  struct Scan {
    int32_t cls, to, next;
  };

  // The sets' entries, in blocks that never move; a set's entries are contiguous in one block. A block is left
  // uninitialized until written, so a parser that makes few sets touches little memory.
  class EntryArena {
   public:
    Entry* allocate(size_t n) {
      if (blocks_.empty() || used_ + n > cap_) {
        cap_ = std::max(BLOCK, n);
        blocks_.push_back(std::unique_ptr<Entry[]>(new Entry[cap_]));
        used_ = 0;
      }
      Entry* p = blocks_.back().get() + used_;
      used_ += n;
      return p;
    }

   private:
    static constexpr size_t BLOCK = size_t{1} << 12;
    std::vector<std::unique_ptr<Entry[]>> blocks_;
    size_t used_ = 0, cap_ = 0;
  };

  static int64_t sat(int64_t x) { return std::min(x, UNREACHABLE); }

  // The entries of set s whose key is `key`.
  static std::pair<const Entry*, const Entry*> with_key(const EarleySet& s, int32_t key) {
    return std::equal_range(s.entries, s.entries + s.size, Entry{key, 0, 0},
                            [](const Entry& a, const Entry& b) { return a.key < b.key; });
  }

  SetInfo info_locked(int32_t id) const {
    const EarleySet& s = sets_[id];
    return {id, s.termset, s.accepting};
  }

  // Fewest bytes of the symbols from dotted position p to the end of its rule.
  int64_t rest(int32_t p) const {
    int64_t n = 0;
    for (; g_->pos_key(p) != g_->end_key(); ++p) n = sat(n + key_minlen(g_->pos_key(p)));
    return n;
  }
  int64_t key_minlen(int32_t key) const {
    const int32_t nt = g_->n_terminals();
    return key < nt ? term_minlen_[key] : nt_minlen_[key - nt];
  }

  // U(origin, N): read from the origin's table (made before any later set's).
  int64_t up_of(int32_t origin, int32_t lhs) const {
    return up_[static_cast<size_t>(origin)].empty() ? UNREACHABLE : up_[static_cast<size_t>(origin)][lhs];
  }

  std::vector<int64_t> nonterminal_minlen() const {
    const int32_t n = g_->n_nonterminals();
    std::vector<int64_t> out(n, UNREACHABLE);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t N = 0; N < n; ++N)
        for (int32_t r : g_->rules_of(N)) {
          int64_t len = 0;
          for (int32_t p = g_->rule_first(r); g_->pos_key(p) != g_->end_key(); ++p) {
            const int32_t k = g_->pos_key(p);
            len = sat(len + (k < g_->n_terminals() ? term_minlen_[k] : out[k - g_->n_terminals()]));
          }
          if (len < out[N]) {
            out[N] = len;
            changed = true;
          }
        }
    }
    return out;
  }

  // The intern table twice as large, every set placed again by its hash.
  void grow_intern() {
    intern_.assign(intern_.size() * 2, -1);
    const size_t mask = intern_.size() - 1;
    for (int64_t id = 1; id < sets_.size(); ++id) {
      size_t h = mix64(sets_[id].hash) & mask;
      while (intern_[h] >= 0) h = (h + 1) & mask;
      intern_[h] = static_cast<int32_t>(id);
    }
  }

  // Earley closure of a kernel (predict, complete), then the set's summary, interned. Caller holds the mutex.
  int32_t close_and_intern(std::vector<Item>& out) {
    const int32_t nt = g_->n_terminals();
    seen_.clear();
    if (predicted_.empty()) predicted_.assign(g_->n_nonterminals(), 0);
    const int32_t stamp = ++stamp_;
    auto pack = [](const Item& it) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(it.pos)) << 32) | static_cast<uint32_t>(it.origin);
    };
    // the closure grows in a scratch kept between closures (the set gets an exact copy in the arena), so a
    // closure allocates nothing
    std::vector<Item>& kernel = out;
    std::vector<Item>& closure = closure_;
    closure.clear();
    auto add = [&](Item it) {
      if (seen_.insert(pack(it))) {
        closure.push_back(it);
        if (static_cast<int64_t>(closure.size()) > g_->max_items())
          throw GrammarTooLarge("an Earley set would exceed " + std::to_string(g_->max_items()) +
                                " items (a highly ambiguous grammar on this input)");
      }
    };
    for (const Item& it : kernel) add(it);
    for (size_t i = 0; i < closure.size(); ++i) {
      const Item it = closure[i];
      const int32_t key = g_->pos_key(it.pos);
      if (key == g_->end_key()) {
        if (it.origin == SELF) continue;  // nullable: moved over at prediction
        const auto [lo, hi] = with_key(sets_[it.origin], nt + g_->pos_lhs(it.pos));
        for (const Entry* w = lo; w != hi; ++w) add({w->pos + 1, w->origin == SELF ? it.origin : w->origin});
      } else if (key >= nt) {
        const int32_t N = key - nt;
        if (predicted_[N] != stamp) {
          predicted_[N] = stamp;
          for (int32_t r : g_->rules_of(N)) add({g_->rule_first(r), SELF});
        }
        if (g_->nullable(N)) add({it.pos + 1, it.origin});
      }
    }
    // a completed item has done its work (its completions are in the closure), and nothing looks it up again:
    // the set keeps only the items that wait on a symbol, so that sets differing only in the origins of what
    // just completed (each item of a list, each digit) are one set
    bool accepting = false;
    size_t waiting = 0;
    for (const Item& it : closure) {
      if (g_->pos_key(it.pos) != g_->end_key())
        closure[waiting++] = it;
      else if (it.pos == g_->aug_start() + 1)
        accepting = true;
    }
    closure.resize(waiting);
    // sorted by (key, pos, origin) through one packed word each where key and position fit 16 bits (a
    // comparison that looks up both keys was a fifth of a closure), else by comparing items
    std::vector<std::pair<uint64_t, int32_t>>& order = order_;
    order.clear();
    bool packed = true;
    for (const Item& it : closure) {
      const uint32_t key = static_cast<uint32_t>(g_->pos_key(it.pos)), pos = static_cast<uint32_t>(it.pos);
      packed = packed && key < (1u << 16) && pos < (1u << 16);
      order.emplace_back((static_cast<uint64_t>(key) << 48) | (static_cast<uint64_t>(pos) << 32) |
                             static_cast<uint32_t>(it.origin + 1),
                         it.origin);
    }
    if (packed) {
      std::sort(order.begin(), order.end());
      for (size_t i = 0; i < closure.size(); ++i)
        closure[i] = Item{static_cast<int32_t>((order[i].first >> 32) & 0xFFFF), order[i].second};
    } else {
      std::sort(closure.begin(), closure.end(), [&](const Item& a, const Item& b) {
        const int32_t ka = g_->pos_key(a.pos), kb = g_->pos_key(b.pos);
        if (ka != kb) return ka < kb;
        if (a.pos != b.pos) return a.pos < b.pos;
        return a.origin < b.origin;
      });
    }
    uint64_t h = accepting ? 1469598103934665603ULL : 7809847782465536322ULL;
    for (const Item& it : closure) h = (h ^ pack(it)) * 1099511628211ULL;
    if (static_cast<size_t>(sets_.size()) * 2 > intern_.size()) grow_intern();
    const size_t mask = intern_.size() - 1;
    size_t slot = mix64(h) & mask;
    for (; intern_[slot] >= 0; slot = (slot + 1) & mask) {
      const EarleySet& other = sets_[intern_[slot]];
      if (other.hash == h && other.accepting == accepting && static_cast<size_t>(other.size) == closure.size() &&
          std::equal(closure.begin(), closure.end(), other.entries,
                     [](const Item& a, const Entry& b) { return a.pos == b.pos && a.origin == b.origin; }))
        return intern_[slot];
    }
    EarleySet set;
    set.accepting = accepting;
    Entry* entries = arena_.allocate(closure.size());
    std::vector<int32_t>& expected = expected_;
    expected.clear();
    for (size_t i = 0; i < closure.size(); ++i) {
      const Item& it = closure[i];
      const int32_t k = g_->pos_key(it.pos);
      entries[i] = Entry{k, it.pos, it.origin};
      if (k < nt && (expected.empty() || expected.back() != k)) expected.push_back(k);
    }
    set.entries = entries;
    set.size = static_cast<int32_t>(closure.size());
    set.hash = h;
    set.termset = g_->termset(expected);
    const int32_t id = static_cast<int32_t>(sets_.size());
    items_ += set.size;
    sets_.push_back(set);
    intern_[slot] = id;
    return id;
  }

  // U(S, N) for every nonterminal N of set S (id s): the fewest bytes that finish the parse once N completes
  // with origin S. Items with origin SELF make it a shortest-path problem inside S (Bellman-Ford over them);
  // the others read their (earlier) origin's table.
  std::vector<int64_t> up_table(int32_t id) const {
    const EarleySet& s = sets_[id];
    const int32_t nt = g_->n_terminals();
    std::vector<int64_t> up(g_->n_nonterminals(), UNREACHABLE);
    if (s.size == 0) return up;
    // the augmented start's item lives in the first set only: the parse ends when it completes from there
    if (std::any_of(s.entries, s.entries + s.size, [&](const Entry& it) { return it.pos == g_->aug_start(); }))
      up[g_->n_nonterminals() - 1] = 0;
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t i = 0; i < s.size; ++i) {
        const Entry& it = s.entries[i];
        const int32_t k = it.key;
        if (k < nt || k == g_->end_key()) continue;
        const int32_t lhs = g_->pos_lhs(it.pos);
        const int64_t above = it.origin == SELF ? up[lhs] : up_of(it.origin, lhs);
        const int64_t c = sat(rest(it.pos + 1) + above);
        if (c < up[k - nt]) {
          up[k - nt] = c;
          changed = true;
        }
      }
    }
    return up;
  }

  std::shared_ptr<Grammar> g_;
  std::vector<int64_t> term_minlen_, nt_minlen_;
  std::mutex mutex_;
  BlockVector<EarleySet> sets_;
  EntryArena arena_;
  std::vector<int32_t> intern_;  // open addressing over set ids by their hash (-1: empty), at most half full
  BlockVector<Scan> scans_;
  int32_t initial_ = 0;
  int64_t items_ = 0;
  // scratch of the closures, kept between them (the mutex is held while they are used)
  std::vector<Item> kernel_, closure_;
  std::vector<std::pair<uint64_t, int32_t>> order_;
  std::vector<int32_t> expected_;
  ItemSet seen_;
  std::vector<int32_t> predicted_;  // per nonterminal, the stamp of the closure that predicted it
  int32_t stamp_ = 0;
  // per set (by id), its `up` table: made on demand (only sampling asks for distances), in id order, since a
  // set's table reads its origins', which are older
  std::vector<std::vector<int64_t>> up_;
};

}  // namespace tooldec::cfg
