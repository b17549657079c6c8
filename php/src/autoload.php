<?php
/*
 * resil's PHP layer, PSR-4 under the namespace Resil (the classes of the
 * extension, Resil\Policy and friends, are the extension's own):
 *
 *   require 'Resil/autoload.php';      (Debian: /usr/share/php is on the include_path)
 *
 * or, with Composer, "autoload": {"psr-4": {"Resil\\": "<this directory>"}}.
 * Guzzle's classes come from Guzzle's own autoloader (Debian:
 * 'GuzzleHttp/autoload.php'); the PSR-15 interfaces from
 * psr/http-server-middleware.
 */
spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Resil\\', 6) !== 0) {
        return;
    }
    $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 6)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
