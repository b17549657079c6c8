--TEST--
resil: who owns a policy's configuration: a file, then an operator's change, then the code
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
/* A PHP worker declares what its code says; resild keeps what a file or
 * an operator says over it (DESIGN's owners of configuration). Each
 * recycled PHP-FPM worker is a new process: resil_child plays one. */
require __DIR__ . '/resil.inc';
function live(string $name, string $line): bool
{
    return str_contains(resilctl('show', $name), $line);
}
function declare_in_child(string $name, string $config): string
{
    [$rc, $out] = resil_child("Resil\\Policy::declare('$name', '$config'); echo 'declared';");
    return $rc == 0 ? $out : "exit $rc: $out";
}
/* the file's policy: a declaration is kept beneath it */
Resil\Policy::declare('phpt_file', 'limit.rate = 50/s');
echo "file holds: ", var_export(live('phpt_file', 'limit.rate = 5/1s'), true), "\n";
/* the code's policy, changed by an operator */
Resil\Policy::declare('phpt_own', 'limit.rate = 10/s');
echo "declared: ", var_export(live('phpt_own', 'limit.rate = 10/1s'), true), "\n";
resilctl('update', 'phpt_own', 'limit.rate = 7/s');
echo "operator: ", var_export(live('phpt_own', 'limit.rate = 7/1s'), true), "\n";
/* workers recycle and declare other values: the operator's holds */
echo declare_in_child('phpt_own', 'limit.rate = 9/s'), "\n";
echo declare_in_child('phpt_own', 'limit.rate = 9/s'), "\n";
echo "still the operator's: ", var_export(live('phpt_own', 'limit.rate = 7/1s'), true), "\n";
echo "show says so: ", var_export(live('phpt_own', 'it holds until resilctl revert phpt_own'), true), "\n";
/* revert: the newest declaration applies */
echo str_contains(resilctl('revert', 'phpt_own'), 'reverted to its declaration') ? "reverted\n" : "no revert\n";
echo "declaration: ", var_export(live('phpt_own', 'limit.rate = 9/1s'), true), "\n";
--EXPECT--
file holds: true
declared: true
operator: true
declared
declared
still the operator's: true
show says so: true
reverted
declaration: true
