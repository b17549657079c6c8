<?php

/**
 * The PHP extension resil: libresil's policies from PHP. The C code
 * implements these declarations; resil_arginfo.h is generated from this
 * file by PHP's own build/gen_stub.php (php/gen_arginfo.sh), and
 * tests/sh_php_stub.sh checks that the committed one is current.
 *
 * @generate-class-entries
 */

namespace Resil {

    /**
     * One named policy of the host (a breaker, a limiter, a bulkhead, a
     * retry budget...), shared by every worker through resild.
     *
     * @strict-properties
     * @not-serializable
     */
    final class Policy
    {
        /** The policy's name. */
        public readonly string $name;

        private function __construct() {}

        /**
         * Declare the policy NAME ("key = value; ..."), as resil_define:
         * files and operators win over it; among declarations the newest
         * process's wins. An identical declaration from the same process
         * costs nothing after the first.
         */
        public static function declare(string $name, string $config): Policy {}

        /** A policy declared elsewhere (a file, resilctl, another process). */
        public static function get(string $name): Policy {}

        /** Admit one call, or throw a Resil\Rejected. */
        public function acquire(?string $key = null): Permit {}

        /** Whether acquire() takes a key: the policy has a keyed limiter (limit.keys); a key given to any other policy is refused. */
        public function keyed(): bool {}

        /** $fn(...$args) under the policy, retried by its retry.* rules and budget. */
        public function call(callable $fn, mixed ...$args): mixed {}

        /** A retry loop decided by the policy; $timeout seconds bounds it. */
        public function retry(?float $timeout = null): Retry {}

        /** The breaker's state: closed, open, half-open, disabled, forced-open, metrics-only. */
        public function state(): string {}

        /** The outcome the policy maps an HTTP status to (breaker.record): Permit::SUCCESS, FAILURE or IGNORED. */
        public function outcomeHttp(int $status): int {}

        /** What this process decided while resild was away: ["admitted" => n, "rejected" => n]. */
        public function pendingStats(): array {}
    }

    /**
     * One admitted call. Report its outcome once; a permit destroyed
     * without an outcome records a failure if an exception is unwinding
     * (or the script died), else a success.
     *
     * @strict-properties
     * @not-serializable
     */
    final class Permit
    {
        /**
         * @var int
         * @cvalue RESIL_SUCCESS
         */
        public const SUCCESS = UNKNOWN;
        /**
         * @var int
         * @cvalue RESIL_FAILURE
         */
        public const FAILURE = UNKNOWN;
        /**
         * @var int
         * @cvalue RESIL_IGNORED
         */
        public const IGNORED = UNKNOWN;

        private function __construct() {}

        public function success(): void {}

        public function failure(): void {}

        /** Neither: frees what the call held, counts nothing. */
        public function ignore(): void {}

        /** Report Permit::SUCCESS, FAILURE or IGNORED. */
        public function release(int $outcome): void {}

        /** Report the outcome the policy maps this HTTP status to. */
        public function releaseHttp(int $status): void {}
    }

    /**
     * A retry loop's state: report each attempt, wait what next() says.
     *
     * @strict-properties
     * @not-serializable
     */
    final class Retry
    {
        /**
         * @var int
         * @cvalue RESIL_ERR_TRANSIENT
         */
        public const TRANSIENT = UNKNOWN;
        /**
         * @var int
         * @cvalue RESIL_ERR_THROTTLED
         */
        public const THROTTLED = UNKNOWN;
        /**
         * @var int
         * @cvalue RESIL_ERR_TIMEOUT
         */
        public const TIMEOUT = UNKNOWN;
        /**
         * @var int
         * @cvalue RESIL_ERR_PERMANENT
         */
        public const PERMANENT = UNKNOWN;

        private function __construct() {}

        /**
         * A failed attempt of class $errorClass; $retryAfter: the seconds
         * the dependency asked for. Returns the seconds to wait before the
         * next attempt, or null to stop (reason() says why).
         */
        public function next(int $errorClass = Retry::TRANSIENT, ?float $retryAfter = null): ?float {}

        /** The attempt succeeded (refunds the retry budget). */
        public function success(): void {}

        /** Why the loop stopped, in words. */
        public function reason(): string {}
    }

    /** A resil call failed: the library's or resild's words; the code is the errno. */
    class ResilException extends \RuntimeException
    {
    }

    /** The policy refused the call. */
    abstract class Rejected extends \RuntimeException
    {
        /** The policy that refused. */
        public readonly string $policy;
        /** Seconds until the policy expects to admit again, or null when it cannot know. */
        public readonly ?float $retryAfter;
    }

    /** The rate limiter refused: retryAfter says when the next permit frees. */
    final class RateLimited extends Rejected
    {
    }

    /** The circuit breaker is open (or its probes are taken). */
    final class CircuitOpen extends Rejected
    {
    }

    /** The bulkhead (or the adaptive limit) is full. */
    final class BulkheadFull extends Rejected
    {
    }

    /** Load shedding refused the call. */
    final class Shed extends Rejected
    {
    }

    /** The retry budget is exhausted. */
    final class BudgetExhausted extends Rejected
    {
    }

    /** 1 if this process decides in resild's segments, 0 while it is pending. */
    function attached(): bool {}

    /** An empty function: the floor the benchmark sets a decision against. */
    function noop(): void {}

    /**
     * ns per acquire + success made $iterations times in C on $policy (the
     * same decision, without PHP): the other floor of the benchmark.
     */
    function bench_c(Policy $policy, int $iterations): float {}
}
