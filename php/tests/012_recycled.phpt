--TEST--
resil: permits are recycled, never while something still holds them
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* The extension hands out again a permit nothing holds any more (see
 * php/permit.c). A reported permit its holder keeps stays reported: it is
 * never handed out while held, however many decisions follow; a
 * WeakReference to one sees it die; every decision counts once. */
require __DIR__ . '/resil.inc';
$p = Resil\Policy::declare('phpt_recycled', 'breaker.window = count:100; breaker.min_calls = 100');

$kept = [];
for ($i = 0; $i < 20; $i++) {
    $permit = $p->acquire();
    $permit->success();
    $kept[] = $permit;
}
$ids = array_map('spl_object_id', $kept);
echo "20 reported permits kept: ", count(array_unique($ids)), " distinct objects\n";
for ($i = 0; $i < 50; $i++) {
    $q = $p->acquire();
    foreach ($kept as $k) {
        if ($k === $q) {
            echo "FAIL: a kept permit was handed out again\n";
        }
    }
    $q->success();
}
$errors = 0;
foreach ($kept as $k) {
    try {
        $k->failure();
    } catch (Error $e) {
        $errors++;
    }
}
echo "each kept permit still refuses a second outcome: $errors of 20\n";

/* a reported permit dropped, then a new decision: the same object may
 * come back, as a new permit that must be reported itself */
$a = $p->acquire();
$a->success();
$ida = spl_object_id($a);
unset($a);
$b = $p->acquire();
$b->failure();
echo "a new permit after the old one was dropped: reportable once\n";
try {
    $b->failure();
} catch (Error $e) {
    echo $e->getMessage(), "\n";
}
unset($b);

/* a WeakReference made after the outcome: dropping the permit leaves it
 * to die at the latest at the next decision, never to come back */
$w = $p->acquire();
$w->success();
$weak = WeakReference::create($w);
unset($w);
$n = $p->acquire();
echo "the weakly referenced permit: ", $weak->get() === null ? "dead" : "alive", "\n";
echo "handed out again: ", $n === $weak->get() ? "yes" : "no", "\n";
$n->success();

$c = counters('phpt_recycled');
printf("calls %d success %d failure %d\n", $c['calls'], $c['success'], $c['failure']);
?>
--EXPECT--
20 reported permits kept: 20 distinct objects
each kept permit still refuses a second outcome: 20 of 20
a new permit after the old one was dropped: reportable once
Resil\Permit: already released
the weakly referenced permit: dead
handed out again: no
calls 74 success 73 failure 1
