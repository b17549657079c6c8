<?php
/*
 * php_bench.php - what a decision costs from PHP, the cases side by side,
 * interleaved in one process (run by bench/php_bench.py, which starts the
 * resild and the redis-server it names, and makes the table).
 *
 *   php php_bench.php N RUNS REDIS_SOCKET|- [resil]
 *
 * "resil": the floors and the extension's cases only (no ganesha), for an
 * extension built from an earlier commit measured beside this one.
 * Prints one line per case and run: "case<TAB>ns per iteration". Every
 * case's loop is the same `for` (its cost included alike; the empty loop
 * is a case of its own).
 *
 * ganesha (Rate strategy) cannot be installed here (Composer's registry is
 * out of reach), so its per-call work is reproduced, not run: the storage
 * operations its adapters make for one isAvailable() + success() of a
 * healthy service, in the order its Rate strategy makes them, written
 * afresh from its documented behaviour:
 *   APCu (tumbling time window): the failure count of the current window
 *     and of the previous one (two apcu_fetch), the success count
 *     incremented (apcu_inc), the status read (apcu_fetch); each key is
 *     prefix + service + "." + floor(time() / timeWindow) + suffix;
 *   Redis (sliding time window, phpredis): the failure set trimmed and
 *     counted (ZREMRANGEBYSCORE, ZCARD), the success set trimmed and
 *     added to (ZREMRANGEBYSCORE, ZADD), the status read (GET): five round
 *     trips.
 * "storage only" is those operations alone; "with its key building" adds
 * the strategy's method calls and key strings around them (the lower
 * bound of ganesha's own cost: its classes do more).
 */
declare(strict_types=1);

[$_, $n, $runs, $redisSock, $only] = $argv + [null, '200000', '7', '-', ''];
$n = (int)$n;
$runs = (int)$runs;

$breaker = Resil\Policy::declare('php_bench_breaker', 'breaker.window = count:100');
$limit = Resil\Policy::declare('php_bench_ip', 'limit.rate = 100000/m; limit.burst = 1000; limit.keys = 65536');
$NIPS = 60000;
$ips = [];
for ($i = 0; $i < $NIPS; $i++) {
    $ips[] = sprintf('10.%d.%d.%d', intdiv($i, 62500), intdiv($i, 250) % 250, $i % 250);
}

/* ganesha's Rate strategy's per-call storage work, reproduced (see above) */
final class GaneshaRateApcu
{
    public function __construct(private int $timeWindow = 30, private string $prefix = 'ganesha_')
    {
    }

    private function key(string $service, int $t, string $suffix): string
    {
        return $this->prefix . sprintf('%s.%d', $service, (int)floor($t / $this->timeWindow)) . $suffix;
    }

    private function load(string $key): int
    {
        return (int)apcu_fetch($key);
    }

    public function isAvailable(string $service): bool
    {
        $failure = $this->load($this->key($service, time(), '_failure'));
        if ($failure !== 0) {
            return false;
        }
        $previous = $this->load($this->key($service, time() - $this->timeWindow, '_failure'));
        return $previous === 0;
    }

    public function success(string $service): void
    {
        apcu_inc($this->key($service, time(), '_success'), 1, $ok);
        $status = apcu_fetch($this->prefix . $service . '_status', $found);
        if (!$found) {
            apcu_store($this->prefix . $service . '_status', 1);
        }
    }
}

final class GaneshaRateRedis
{
    public function __construct(private \Redis $redis, private int $timeWindow = 30,
                                private string $prefix = 'ganesha_')
    {
    }

    private function load(string $key): int
    {
        $this->redis->zRemRangeByScore($key, '-inf', (string)(microtime(true) - $this->timeWindow));
        return (int)$this->redis->zCard($key);
    }

    public function isAvailable(string $service): bool
    {
        return $this->load($this->prefix . $service . '_failure') === 0;
    }

    public function success(string $service): void
    {
        $key = $this->prefix . $service . '_success';
        $t = microtime(true);
        $this->redis->zRemRangeByScore($key, '-inf', (string)($t - $this->timeWindow));
        $this->redis->zAdd($key, $t, (string)$t);
        $status = $this->redis->get($this->prefix . $service . '_status');
        if ($status === false) {
            $this->redis->set($this->prefix . $service . '_status', '1');
        }
    }
}

$cases = [];
$cases['empty loop'] = function (int $n) {
    for ($i = 0; $i < $n; $i++) {
    }
};
$cases['floor: two calls of an empty internal function'] = function (int $n) {
    for ($i = 0; $i < $n; $i++) {
        Resil\noop();
        Resil\noop();
    }
};
$cases['floor: the breaker decision in C (acquire + release), Resil\bench_c'] = function (int $n) use ($breaker) {
    return [Resil\bench_c($breaker, $n)];
};
$cases['resil breaker: $permit = $p->acquire(); $permit->success()'] = function (int $n) use ($breaker) {
    for ($i = 0; $i < $n; $i++) {
        $permit = $breaker->acquire();
        $permit->success();
    }
};
$cases['resil breaker: $p->acquire()->success()'] = function (int $n) use ($breaker) {
    for ($i = 0; $i < $n; $i++) {
        $breaker->acquire()->success();
    }
};
$cases['floor: two calls, keyed loop (60000 IPs)'] = function (int $n) use ($ips, $NIPS) {
    for ($i = 0; $i < $n; $i++) {
        $ip = $ips[$i % $NIPS];
        Resil\noop();
        Resil\noop();
    }
};
$cases['resil keyed limit: $p->acquire($ip)->success() (60000 IPs)'] = function (int $n) use ($limit, $ips, $NIPS) {
    for ($i = 0; $i < $n; $i++) {
        $ip = $ips[$i % $NIPS];
        $limit->acquire($ip)->success();
    }
};
if ($only !== 'resil' && function_exists('apcu_fetch') && apcu_enabled()) {
    $cases['ganesha Rate + APCu, storage only (3 fetch, 1 inc)'] = function (int $n) {
        for ($i = 0; $i < $n; $i++) {
            apcu_fetch('ganesha_svc.59000_failure');
            apcu_fetch('ganesha_svc.58999_failure');
            apcu_inc('ganesha_svc.59000_success', 1, $ok);
            apcu_fetch('ganesha_svc_status');
        }
    };
    $g = new GaneshaRateApcu();
    $cases['ganesha Rate + APCu, with its key building'] = function (int $n) use ($g) {
        for ($i = 0; $i < $n; $i++) {
            if ($g->isAvailable('svc')) {
                $g->success('svc');
            }
        }
    };
}
if ($only !== 'resil' && $redisSock !== '-' && class_exists('Redis')) {
    $r = new \Redis();
    $r->connect($redisSock);
    $g = new GaneshaRateRedis($r);
    $cases['ganesha Rate + Redis (phpredis, unix socket, 5 round trips)'] = function (int $n) use ($g) {
        $n = max(1, intdiv($n, 100));
        for ($i = 0; $i < $n; $i++) {
            if ($g->isAvailable('svc')) {
                $g->success('svc');
            }
        }
        return $n;
    };
}

foreach ($cases as $name => $loop) {
    $loop(1000); /* warm: each handle, key and cache in place */
}
for ($run = 0; $run < $runs; $run++) {
    foreach ($cases as $name => $loop) {
        $t = hrtime(true);
        $done = $loop($n) ?? $n;
        /* bench_c measures itself: no loop of PHP around it */
        printf("%s\t%.2f\n", $name, is_array($done) ? $done[0] : (hrtime(true) - $t) / $done);
    }
}
