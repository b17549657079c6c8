<?php

declare(strict_types=1);

namespace Resil\Http;

/**
 * The address of the client that sent a request: REMOTE_ADDR, or, when
 * REMOTE_ADDR is a trusted proxy, the last address of X-Forwarded-For
 * that is not one (walked from the right: each trusted proxy appended the
 * address it received from). A header from an untrusted peer is never
 * read, so no client can choose its own key.
 */
final class ClientIp
{
    /** @var list<array{string, int}> the trusted networks: packed address, prefix length */
    private array $trusted = [];

    /**
     * @param list<string> $trustedProxies addresses or CIDR networks ("10.0.0.0/8", "::1")
     * @param string $header the header proxies append to
     */
    public function __construct(array $trustedProxies = [], private string $header = 'X-Forwarded-For')
    {
        foreach ($trustedProxies as $net) {
            [$addr, $bits] = str_contains($net, '/') ? explode('/', $net, 2) : [$net, null];
            $packed = @inet_pton($addr);
            $max = $packed === false ? 0 : strlen($packed) * 8;
            if ($packed === false || ($bits !== null && (!preg_match('/^[0-9]+$/', $bits) || (int)$bits > $max))) {
                throw new \ValueError("Resil\\Http\\ClientIp: '$net' is not an address or a CIDR network");
            }
            $this->trusted[] = [$packed, $bits === null ? $max : (int)$bits];
        }
    }

    /** The client's address; $remoteAddr: the peer's (REMOTE_ADDR). */
    public function of(string $remoteAddr, string $forwardedFor = ''): string
    {
        if (!$this->isTrusted($remoteAddr) || $forwardedFor === '') {
            return $remoteAddr;
        }
        $hops = array_map('trim', explode(',', $forwardedFor));
        for ($i = count($hops) - 1; $i >= 0; $i--) {
            $hop = $hops[$i];
            if (@inet_pton($hop) === false) {
                break; /* garbage: trust nothing further left */
            }
            if (!$this->isTrusted($hop)) {
                return $hop;
            }
            $remoteAddr = $hop;
        }
        return $remoteAddr;
    }

    /** The client's address of a PSR-7 server request. */
    public function ofRequest(\Psr\Http\Message\ServerRequestInterface $request): string
    {
        $remote = (string)($request->getServerParams()['REMOTE_ADDR'] ?? '');
        return $this->of($remote, $request->getHeaderLine($this->header));
    }

    public function isTrusted(string $addr): bool
    {
        $packed = @inet_pton($addr);
        if ($packed === false) {
            return false;
        }
        foreach ($this->trusted as [$net, $bits]) {
            if (strlen($net) !== strlen($packed)) {
                continue;
            }
            $bytes = intdiv($bits, 8);
            if (substr($net, 0, $bytes) !== substr($packed, 0, $bytes)) {
                continue;
            }
            $rest = $bits % 8;
            if ($rest === 0) {
                return true;
            }
            $mask = (0xff << (8 - $rest)) & 0xff;
            if ((ord($net[$bytes]) & $mask) === (ord($packed[$bytes]) & $mask)) {
                return true;
            }
        }
        return false;
    }
}
