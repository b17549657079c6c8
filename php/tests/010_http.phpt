--TEST--
resil's PHP layer: the client's address through trusted proxies, the PSR-15 middleware's keys and answers, Retry-After
--SKIPIF--
<?php if (!extension_loaded("resil")) die("skip the resil extension is not loaded");
if (!stream_resolve_include_path("GuzzleHttp/autoload.php")) die("skip no Guzzle (apt-get install php-guzzlehttp-guzzle)"); ?>
--FILE--
<?php
/* The PHP layer's pure parts: the client's address through trusted
 * proxies, the key a request is limited under, Retry-After parsing. */
require 'GuzzleHttp/autoload.php';
require getenv('RESIL_PHP_SRC') . '/autoload.php';
require getenv('RESIL_PHP_SRC') . '/../tests/fpm/psr15.php';
use Resil\Http\ClientIp;

$ip = new ClientIp(['10.0.0.0/8', '192.168.1.7', '2001:db8::/32']);
$cases = [
    ['203.0.113.5', ''],                                    /* a direct client */
    ['203.0.113.5', '198.51.100.1'],                        /* an untrusted peer's header is ignored */
    ['10.1.2.3', '198.51.100.1'],                           /* through one trusted proxy */
    ['10.1.2.3', '198.51.100.1, 192.168.1.7'],              /* through two */
    ['10.1.2.3', '6.6.6.6, 198.51.100.1, 10.9.9.9'],        /* a spoofed left part is not believed */
    ['10.1.2.3', '10.4.4.4, 10.5.5.5'],                     /* only proxies: the leftmost */
    ['10.1.2.3', 'garbage, 198.51.100.1'],                  /* garbage left of the client */
    ['10.1.2.3', '198.51.100.1, garbage'],                  /* garbage: nothing further left */
    ['2001:db8::1', '2001:db9::5'],                         /* IPv6 */
    ['192.168.1.8', '198.51.100.1'],                        /* a neighbour of a trusted proxy */
];
foreach ($cases as [$remote, $xff]) {
    printf("%-12s %-40s -> %s\n", $remote, "'$xff'", $ip->of($remote, $xff));
}
foreach (['10.0.0.0/33', 'not-an-address', '::1/129', '1.2.3.4/x'] as $bad) {
    try {
        new ClientIp([$bad]);
    } catch (ValueError $e) {
        echo $e->getMessage(), "\n";
    }
}

$policy = Resil\Policy::declare('phpt_http', 'limit.rate = 1/m; limit.burst = 1; limit.keys = 64');
$f = new GuzzleHttp\Psr7\HttpFactory();
$mw = new Resil\Http\RateLimitMiddleware($f, $policy, 'X-Api-Key', ['10.0.0.0/8']);
$req = fn(array $h, string $remote) => new GuzzleHttp\Psr7\ServerRequest('GET', '/', $h, null, '1.1', ['REMOTE_ADDR' => $remote]);
echo $mw->keyOf($req([], '203.0.113.5')), "\n";
echo $mw->keyOf($req(['X-Api-Key' => 'k-123'], '203.0.113.5')), "\n";
echo $mw->keyOf($req(['X-Forwarded-For' => '198.51.100.1'], '10.0.0.1')), "\n";
$app = new class implements Psr\Http\Server\RequestHandlerInterface {
    public int $status = 200;
    public function handle(Psr\Http\Message\ServerRequestInterface $r): Psr\Http\Message\ResponseInterface
    {
        return new GuzzleHttp\Psr7\Response($this->status);
    }
};
$r = $mw->process($req([], '203.0.113.9'), $app);
echo "first: ", $r->getStatusCode(), "\n";
$r = $mw->process($req([], '203.0.113.9'), $app);
echo "second: ", $r->getStatusCode(), " Retry-After: ", $r->getHeaderLine('Retry-After'), "\n";
$r = $mw->process($req(['X-Api-Key' => 'k-9'], '203.0.113.9'), $app);
echo "another key: ", $r->getStatusCode(), "\n";

$open = Resil\Policy::declare('phpt_http_open', 'breaker.window = consecutive:1; breaker.wait = 30s');
$mw = new Resil\Http\RateLimitMiddleware($f, 'phpt_http_open');
$app->status = 502;
echo "a 502 from the application: ", $mw->process($req([], '203.0.113.9'), $app)->getStatusCode(), "\n";
$r = $mw->process($req([], '203.0.113.9'), $app);
echo "then the breaker: ", $r->getStatusCode(), "\n";

foreach (['120', '0', '', 'soon', gmdate('D, d M Y H:i:s', time() + 100) . ' GMT'] as $v) {
    $ra = Resil\Http\GuzzleMiddleware::retryAfter(new GuzzleHttp\Psr7\Response(503, $v === '' ? [] : ['Retry-After' => $v]));
    echo "Retry-After '", strlen($v) > 10 ? 'a date 100 s ahead' : $v, "': ", var_export($ra !== null && $ra > 90 && $ra <= 100 ? 'about 100' : $ra, true), "\n";
}
--EXPECT--
203.0.113.5  ''                                       -> 203.0.113.5
203.0.113.5  '198.51.100.1'                           -> 203.0.113.5
10.1.2.3     '198.51.100.1'                           -> 198.51.100.1
10.1.2.3     '198.51.100.1, 192.168.1.7'              -> 198.51.100.1
10.1.2.3     '6.6.6.6, 198.51.100.1, 10.9.9.9'        -> 198.51.100.1
10.1.2.3     '10.4.4.4, 10.5.5.5'                     -> 10.4.4.4
10.1.2.3     'garbage, 198.51.100.1'                  -> 198.51.100.1
10.1.2.3     '198.51.100.1, garbage'                  -> 10.1.2.3
2001:db8::1  '2001:db9::5'                            -> 2001:db9::5
192.168.1.8  '198.51.100.1'                           -> 192.168.1.8
Resil\Http\ClientIp: '10.0.0.0/33' is not an address or a CIDR network
Resil\Http\ClientIp: 'not-an-address' is not an address or a CIDR network
Resil\Http\ClientIp: '::1/129' is not an address or a CIDR network
Resil\Http\ClientIp: '1.2.3.4/x' is not an address or a CIDR network
ip:203.0.113.5
key:k-123
ip:198.51.100.1
first: 200
second: 429 Retry-After: 60
another key: 200
a 502 from the application: 502
then the breaker: 503
Retry-After '120': 120.0
Retry-After '0': 0.0
Retry-After '': NULL
Retry-After 'soon': NULL
Retry-After 'a date 100 s ahead': 'about 100'
