--TEST--
resil: the classes, methods, constants and functions of the extension
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded"); ?>
--FILE--
<?php
function sig(string $c, string $m): string
{
    $r = new ReflectionMethod($c, $m);
    $ps = [];
    foreach ($r->getParameters() as $p) {
        $ps[] = trim(($p->getType() ?? '') . ' ' . ($p->isVariadic() ? '...' : '') . '$' . $p->getName()
            . ($p->isDefaultValueAvailable() ? ' = ' . var_export($p->getDefaultValue(), true) : ''));
    }
    return ($r->isStatic() ? 'static ' : '') . ($r->isPrivate() ? 'private ' : '') . "$m(" . implode(', ', $ps) . ')' . ($r->hasReturnType() ? ': ' . $r->getReturnType() : '');
}
foreach (['Resil\Policy', 'Resil\Permit', 'Resil\Retry'] as $c) {
    $r = new ReflectionClass($c);
    echo ($r->isFinal() ? 'final ' : ''), "class $c\n";
    foreach ($r->getReflectionConstants() as $k) {
        echo "  const ", $k->getName(), " = ", $k->getValue(), "\n";
    }
    foreach ($r->getProperties() as $p) {
        echo "  ", $p->isReadOnly() ? 'readonly ' : '', $p->getType(), ' $', $p->getName(), "\n";
    }
    foreach ($r->getMethods() as $m) {
        echo "  ", sig($c, $m->getName()), "\n";
    }
}
foreach (['Resil\ResilException', 'Resil\Rejected', 'Resil\RateLimited', 'Resil\CircuitOpen',
          'Resil\BulkheadFull', 'Resil\Shed', 'Resil\BudgetExhausted'] as $c) {
    $r = new ReflectionClass($c);
    echo $r->isAbstract() ? 'abstract ' : '', $r->isFinal() ? 'final ' : '', "$c extends ", get_parent_class($c), "\n";
}
foreach (['retryAfter', 'policy'] as $p) {
    $rp = new ReflectionProperty('Resil\Rejected', $p);
    echo "Rejected::\$$p: ", $rp->isReadOnly() ? 'readonly ' : '', $rp->getType(), "\n";
}
foreach (['Resil\attached', 'Resil\noop', 'Resil\bench_c'] as $f) {
    $r = new ReflectionFunction($f);
    echo "$f(): ", $r->getReturnType(), "\n";
}
var_dump(Resil\noop());
var_dump(extension_loaded('resil'), phpversion('resil') !== false);
--EXPECT--
final class Resil\Policy
  readonly string $name
  private __construct()
  static declare(string $name, string $config): Resil\Policy
  static get(string $name): Resil\Policy
  acquire(?string $key = NULL): Resil\Permit
  keyed(): bool
  call(callable $fn, mixed ...$args): mixed
  retry(?float $timeout = NULL): Resil\Retry
  state(): string
  outcomeHttp(int $status): int
  pendingStats(): array
final class Resil\Permit
  const SUCCESS = 0
  const FAILURE = 1
  const IGNORED = 2
  private __construct()
  success(): void
  failure(): void
  ignore(): void
  release(int $outcome): void
  releaseHttp(int $status): void
final class Resil\Retry
  const TRANSIENT = 1
  const THROTTLED = 2
  const TIMEOUT = 3
  const PERMANENT = 4
  private __construct()
  next(int $errorClass = 1, ?float $retryAfter = NULL): ?float
  success(): void
  reason(): string
Resil\ResilException extends RuntimeException
abstract Resil\Rejected extends RuntimeException
final Resil\RateLimited extends Resil\Rejected
final Resil\CircuitOpen extends Resil\Rejected
final Resil\BulkheadFull extends Resil\Rejected
final Resil\Shed extends Resil\Rejected
final Resil\BudgetExhausted extends Resil\Rejected
Rejected::$retryAfter: readonly ?float
Rejected::$policy: readonly string
Resil\attached(): bool
Resil\noop(): void
Resil\bench_c(): float
NULL
bool(true)
bool(true)
