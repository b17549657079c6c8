<?php
/* opcache.preload runs this in the PHP-FPM master, before it forks its
 * workers: the master opens the process's handle (and declares), and
 * every worker inherits it; the test reads who ran it, and whether its
 * handle reached resild. */
Resil\Policy::declare('php_fpm_bulkhead', 'bulkhead.max = 1');
file_put_contents(dirname(ini_get('resil.socket')) . '/preloaded',
    getmypid() . ' ' . (Resil\attached() ? 'attached' : 'pending'));
