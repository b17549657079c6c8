--TEST--
resil: a permit without an outcome: failure while an exception unwinds or when the script dies, else success
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* A permit destroyed without success() or failure() records a failure if
 * an exception is unwinding, else a success; each explicit outcome counts
 * once. Counted by resild (resilctl show). */
require __DIR__ . '/resil.inc';
$p = Resil\Policy::declare('phpt_dtor', 'breaker.window = count:100; breaker.min_calls = 100');
function dropped(Resil\Policy $p): void
{
    $permit = $p->acquire();   /* the scope ends normally */
}
function unwound(Resil\Policy $p): void
{
    $permit = $p->acquire();
    throw new RuntimeException('the dependency failed');
}
function caught_inside(Resil\Policy $p): void
{
    $permit = $p->acquire();
    try {
        throw new RuntimeException('handled here');
    } catch (RuntimeException $e) {
    }
}   /* the exception was handled: the scope ends normally */
function show(string $what): void
{
    $c = counters('phpt_dtor');
    printf("%-28s calls %d success %d failure %d ignored %d\n", $what, $c['calls'], $c['success'], $c['failure'], $c['ignored']);
}
dropped($p);
show('dropped');
try {
    unwound($p);
} catch (RuntimeException $e) {
}
show('unwound by an exception');
caught_inside($p);
show('exception caught inside');
$permit = $p->acquire();
$permit = null;
show('overwritten');
$p->acquire();
show('never assigned');
$permit = $p->acquire();
$permit->failure();
$permit = null;
show('failure(), then dropped');
$permit = $p->acquire();
$permit->ignore();
unset($permit);
show('ignore()');
$permit = $p->acquire();
$permit->releaseHttp(503);
show('releaseHttp(503)');
$permit = $p->acquire();
$permit->releaseHttp(404);
show('releaseHttp(404)');
$permit = $p->acquire();
$permit->release(Resil\Permit::SUCCESS);
show('release(SUCCESS)');
var_dump($p->outcomeHttp(200) === Resil\Permit::SUCCESS, $p->outcomeHttp(500) === Resil\Permit::FAILURE,
    $p->outcomeHttp(404) === Resil\Permit::IGNORED);

/* the script ends while a permit is held: an uncaught exception is a
 * failure, a normal end a success, a fatal error a failure; in a child
 * process each, counted by resild */
$base = 'Resil\Policy::get("phpt_dtor");';
[$rc, $out] = resil_child('$p = ' . $base . ' $permit = $p->acquire(); throw new Exception("uncaught");');
echo "uncaught exception: exit $rc\n";
show('held at an uncaught exception');
[$rc, $out] = resil_child('$p = ' . $base . ' $permit = $p->acquire(); echo "done";');
echo "normal end: exit $rc\n";
show('held at the end of a script');
[$rc, $out] = resil_child('$p = ' . $base . ' $permit = $p->acquire(); function f() { f(); } ini_set("memory_limit", "8M"); f();');
echo "fatal error: exit $rc\n";
show('held at a fatal error');
[$rc, $out] = resil_child('$p = ' . $base . ' $permit = $p->acquire(); exit(3);');
echo "exit(3): exit $rc\n";
show('held at exit()');
--EXPECT--
dropped                      calls 1 success 1 failure 0 ignored 0
unwound by an exception      calls 2 success 1 failure 1 ignored 0
exception caught inside      calls 3 success 2 failure 1 ignored 0
overwritten                  calls 4 success 3 failure 1 ignored 0
never assigned               calls 5 success 4 failure 1 ignored 0
failure(), then dropped      calls 6 success 4 failure 2 ignored 0
ignore()                     calls 7 success 4 failure 2 ignored 1
releaseHttp(503)             calls 8 success 4 failure 3 ignored 1
releaseHttp(404)             calls 9 success 4 failure 3 ignored 2
release(SUCCESS)             calls 10 success 5 failure 3 ignored 2
bool(true)
bool(true)
bool(true)
uncaught exception: exit 255
held at an uncaught exception calls 11 success 5 failure 4 ignored 2
normal end: exit 0
held at the end of a script  calls 12 success 6 failure 4 ignored 2
fatal error: exit 255
held at a fatal error        calls 13 success 6 failure 5 ignored 2
exit(3): exit 3
held at exit()               calls 14 success 7 failure 5 ignored 2
