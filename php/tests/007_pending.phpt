--TEST--
resil: without resild, each policy decides by its fallback
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--INI--
resil.socket=/nonexistent-resil/control.sock
--FILE--
<?php
/* No resild on the socket: the process's handle is pending and each
 * policy decides by its policy.fallback; resil.fallback sets it for
 * declarations that name none. */
require __DIR__ . '/resil.inc';
$l = Resil\Policy::declare('phpt_pending_local', 'limit.rate = 1/m; limit.burst = 5');
var_dump(Resil\attached());
$n = 0;
try {
    while ($n < 10) {
        $l->acquire()->success();
        $n++;
    }
} catch (Resil\RateLimited $e) {
    echo "local: the process's own limiter admitted $n, then ", get_class($e), "\n";
}
var_dump($l->pendingStats());
$r = Resil\Policy::declare('phpt_pending_reject', 'limit.rate = 1/m; limit.burst = 5; policy.fallback = reject');
try {
    $r->acquire();
} catch (Resil\Rejected $e) {
    echo "reject: ", get_class($e), "\n";
}
$a = Resil\Policy::declare('phpt_pending_admit', 'limit.rate = 1/m; limit.burst = 1; policy.fallback = admit');
for ($i = 0; $i < 10; $i++) {
    $a->acquire()->success();
}
echo "admit: 10 admitted\n";
var_dump($a->pendingStats());
$u = Resil\Policy::get('phpt_pending_undeclared');
$u->acquire()->success();
echo "a name never declared admits while pending\n";

/* resil.fallback = reject for the declarations of a process */
$code = '$p = Resil\Policy::declare("phpt_pending_ini", "limit.rate = 1/m; limit.burst = 5");' .
    'try { $p->acquire(); echo "admitted\n"; } catch (Resil\Rejected $e) { echo get_class($e), "\n"; }' .
    '$q = Resil\Policy::declare("phpt_pending_own", "limit.rate = 1/m; limit.burst = 5; policy.fallback = local");' .
    'try { $q->acquire(); echo "its own fallback: admitted\n"; } catch (Resil\Rejected $e) { echo get_class($e), "\n"; }';
[$rc, $out] = resil_child($code, ['resil.fallback' => 'reject']);
echo "resil.fallback = reject: ", $out;
[$rc, $out] = resil_child('echo "unused\n";', ['resil.fallback' => 'sometimes']);
echo $out;
--EXPECTF--
bool(false)
local: the process's own limiter admitted 5, then Resil\RateLimited
array(2) {
  ["admitted"]=>
  int(5)
  ["rejected"]=>
  int(1)
}
reject: Resil\CircuitOpen
admit: 10 admitted
array(2) {
  ["admitted"]=>
  int(10)
  ["rejected"]=>
  int(0)
}
a name never declared admits while pending
resil.fallback = reject: Resil\CircuitOpen
its own fallback: admitted

Warning: PHP Startup: resil.fallback = 'sometimes': the fallback is local, admit or reject in %s on line %d
unused
