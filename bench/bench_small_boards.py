"""What one tick's writes over a million categories cost Redis, as the engine writes them and as one
hash per category would (an experiment: no engine code writes the hash).

A tick of 5,000 sales, each in a category of its own among a million and in `all`, changes each
sale's eight boards (four windows, two metrics) and `all`'s eight. Lua calls of 2,000 sales write
them on the plain Redis under the benchmark's key prefix: the categories' boards as eight sorted
sets each (ZINCRBY, the member left when its score is no longer positive, ZCARD and DEL of the
blob, as lua/apply.lua does) or as one hash of board and product each (HINCRBY); then `all`'s
40,000 changes on its eight sorted sets, which grow run by run. Each figure: Redis's own CPU for a
tick's writes (INFO cpu), the median of the runs; each run takes 5,000 categories never written.

    python -m bench --only small_boards
"""

import random

from bench import harness

SALES = 5_000
CALL = 2_000  # sales a Lua call
# ARGV: pairs (category, product), or products for `all`; KEYS[1]: the key prefix (keys are made in
# the script: an experiment on one server). Each script starts with the boards' windows and metrics.
_BOARDS = "local WINDOWS, METRICS = {'1h', '1d', '7d', '30d'}, {'units', 'revenue'}\n"
_SORTED_SETS = (
    _BOARDS
    + """
for i = 1, #ARGV, 2 do
  local board = KEYS[1] .. ':{' .. ARGV[i] .. '}:'
  for _, w in ipairs(WINDOWS) do
    for _, m in ipairs(METRICS) do
      local key = board .. 'b:' .. w .. ':' .. m
      if tonumber(redis.call('ZINCRBY', key, -1, ARGV[i + 1])) >= 0 then redis.call('ZREM', key, ARGV[i + 1]) end
    end
    if redis.call('ZCARD', board .. 'b:' .. w .. ':units') <= 100 then redis.call('DEL', board .. 't:' .. w) end
  end
end
"""
)
_HASH = (
    _BOARDS
    + """
for i = 1, #ARGV, 2 do
  local key = KEYS[1] .. ':{' .. ARGV[i] .. '}:h'
  for _, w in ipairs(WINDOWS) do
    for _, m in ipairs(METRICS) do
      local field = w .. ':' .. m .. ':' .. ARGV[i + 1]
      if redis.call('HINCRBY', key, field, 1) <= 0 then redis.call('HDEL', key, field) end
    end
  end
end
"""
)
_ALL = (
    _BOARDS
    + """
for i = 1, #ARGV do
  for _, w in ipairs(WINDOWS) do
    for _, m in ipairs(METRICS) do
      redis.call('ZINCRBY', KEYS[1] .. ':{all}:b:' .. w .. ':' .. m, -1, ARGV[i])
    end
  end
end
"""
)


def _cpu(client) -> float:
    info = client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def run(table: harness.Table | None = None, runs: int = 3) -> harness.Table:
    from rankings.engine import store

    table = table or harness.Table()
    client = store.patient()
    prefix = f"{harness.BENCH_PREFIX}:small-boards"
    scripts = {
        name: client.register_script(text)
        for name, text in (("sorted", _SORTED_SETS), ("hash", _HASH), ("all", _ALL))
    }
    seconds: dict[str, list[float]] = {name: [] for name in scripts}
    print("small boards: one tick's writes over 5,000 of a million categories…", flush=True)
    try:
        for run_ in range(max(runs, 5)):
            rnd = random.Random(run_)
            sales = [
                (f"c{run_}-{rnd.randrange(1_000_000):07d}", f"q{rnd.randrange(5_000_000)}")
                for _ in range(SALES)
            ]
            for name in ("sorted", "hash"):
                args = [word for category, product in sales for word in (f"{name}-{category}", product)]
                before = _cpu(client)
                for first in range(0, len(args), 2 * CALL):
                    scripts[name](keys=[prefix], args=args[first : first + 2 * CALL])
                seconds[name].append(_cpu(client) - before)
            before = _cpu(client)
            for first in range(0, SALES, CALL):
                scripts["all"](keys=[prefix], args=[product for _, product in sales[first : first + CALL]])
            seconds["all"].append(_cpu(client) - before)
    finally:
        harness.keys_delete(f"{prefix}:*")
    sorted_sets, hashes, whole = (harness.median(seconds[name]) for name in ("sorted", "hash", "all"))
    table.add(
        "a tick's writes of 5,000 sales' small boards (a million categories): Redis CPU",
        f"one hash a category {hashes:.3f} s",
        f"eight sorted sets a category (the engine's) {sorted_sets:.3f} s",
        f"{hashes / sorted_sets:.2f}x",
        f"`all`'s 40,000 changes besides: {whole:.3f} s; the goal's whole tick: 0.25 s",
    )
    return table


if __name__ == "__main__":
    harness.setup()
    print(run().render())
