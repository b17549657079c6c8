--TEST--
resil: a forked child decides on the fleet's policy; a killed child's permit comes back
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); 
if (!function_exists("pcntl_fork")) die("skip no pcntl"); ?>
--FILE--
<?php
/* Fork: a child of a process that opened its handle decides on the same
 * fleet-wide policy as its own client (libresil's fork handlers); what a
 * child holds when it is killed comes back (resild reclaims its row). */
$b = Resil\Policy::declare('phpt_fork', 'bulkhead.max = 1');
$b->acquire()->success();
var_dump(Resil\attached());
function child(Resil\Policy $b, bool $release): array
{
    [$r, $w] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid == 0) {
        fclose($r);
        try {
            $permit = $b->acquire();
            fwrite($w, "held\n");
        } catch (Throwable $e) {
            fwrite($w, get_class($e) . "\n");
        }
        if ($release) {
            fgets($w);
            $permit->success();
            fwrite($w, "released\n");
            exit(0);
        }
        sleep(60);
        exit(0);
    }
    fclose($w);
    return [$pid, $r];
}
function full(Resil\Policy $b): bool
{
    try {
        $b->acquire();
        return false;
    } catch (Resil\BulkheadFull $e) {
        return true;
    }
}
[$pid, $s] = child($b, true);
echo "child: ", fgets($s);
var_dump(full($b));
fwrite($s, "go\n");
echo "child: ", fgets($s);
pcntl_waitpid($pid, $st);
var_dump(full($b));

[$pid, $s] = child($b, false);
echo "child: ", fgets($s);
var_dump(full($b));
exec("kill -KILL $pid");
pcntl_waitpid($pid, $st);
echo "killed by signal ", pcntl_wtermsig($st), "\n";
/* resild reclaims the dead child's permit: eventually, within 10 s */
$t = microtime(true);
while (full($b) && microtime(true) - $t < 10) {
    usleep(20000);
}
var_dump(full($b));
--EXPECT--
bool(true)
child: held
bool(true)
child: released
bool(false)
child: held
bool(true)
killed by signal 9
bool(false)
