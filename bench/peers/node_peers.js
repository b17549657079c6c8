// SPDX-License-Identifier: MIT
// node_peers.js - what an in-process Node.js breaker or bulkhead costs per
// call, on this machine, in the same run as resil_bench.
//
//   node bench/peers/node_peers.js [--smoke] [--out FILE]
//
// Method (as resil_bench): each case is a loop calibrated to about 40 ms,
// run 7 times (1 with --smoke), cases interleaved run by run; the figure is
// the median ns per call with the min and max of the runs. Every library
// wraps an async function (its API), so every case awaits a promise: the
// baseline `bare` is the same loop awaiting the wrapped function directly,
// and a library's own cost is its figure minus the baseline's (the report
// computes it). The wrapped function always succeeds: the breakers stay
// closed, the bulkhead is never full.
//
// Output: TSV rows group "peer", name "<library>.<case>", metric ns_op,
// median, min, max, unit ns, note (the library's version), on --out
// (appended) or stdout.
'use strict';

const fs = require('fs');
const path = require('path');

const args = process.argv.slice(2);
const smoke = args.includes('--smoke');
const outIdx = args.indexOf('--out');
const out = outIdx >= 0 ? args[outIdx + 1] : null;
const RUNS = smoke ? 1 : 7;
const TARGET_NS = (smoke ? 5 : 40) * 1e6;

function version(name)
{
	try {
		const p = require.resolve(name + '/package.json', {paths : [ __dirname ]});
		return JSON.parse(fs.readFileSync(p, 'utf8')).version;
	} catch (e) {
		return null;
	}
}

const now = () => process.hrtime.bigint();

async function bare()
{
	return 1;
}

async function loop(fn, n)
{
	const t = now();
	for (let i = 0; i < n; i++)
		await fn();
	return Number(now() - t) / n;
}

async function calibrate(fn)
{
	let n = 64;
	for (;;) {
		const t = now();
		for (let i = 0; i < n; i++)
			await fn();
		const el = Number(now() - t);
		if (el >= TARGET_NS / 4 || n >= 1 << 26)
			return Math.max(64, Math.round((n * TARGET_NS) / Math.max(el, 1)));
		n *= 4;
	}
}

async function main()
{
	const cases = [ {name : 'bare.await', fn : bare, note : 'node ' + process.version} ];
	const vo = version('opossum'), vc = version('cockatiel');

	if (vo) {
		const CircuitBreaker = require(require.resolve('opossum', {paths : [ __dirname ]}));
		const b = new CircuitBreaker(bare, {}); /* defaults: as ANCHORS.md */
		cases.push({name : 'opossum.breaker', fn : () => b.fire(), note : 'opossum ' + vo});
	} else {
		process.stderr.write(
		    'node_peers: opossum not installed (npm install in bench/peers)\n');
	}
	if (vc) {
		const c = require(require.resolve('cockatiel', {paths : [ __dirname ]}));
		const cons = c.circuitBreaker(c.handleAll, {
			halfOpenAfter : 10000,
			breaker : new c.ConsecutiveBreaker(5),
		});
		const samp = c.circuitBreaker(c.handleAll, {
			halfOpenAfter : 10000,
			breaker : new c.SamplingBreaker({threshold : 0.5, duration : 10000}),
		});
		const bh = c.bulkhead(25, 0);
		const stack = c.wrap(
		    c.retry(c.handleAll, {maxAttempts : 3, backoff : new c.ExponentialBackoff()}),
		    cons, c.bulkhead(25, 0));
		const note = 'cockatiel ' + vc;
		cases.push(
		    {name : 'cockatiel.breaker_consecutive', fn : () => cons.execute(bare), note});
		cases.push(
		    {name : 'cockatiel.breaker_sampling', fn : () => samp.execute(bare), note});
		cases.push({name : 'cockatiel.bulkhead', fn : () => bh.execute(bare), note});
		cases.push({
			name : 'cockatiel.retry_breaker_bulkhead',
			fn : () => stack.execute(bare),
			note
		});
	} else {
		process.stderr.write(
		    'node_peers: cockatiel not installed (npm install in bench/peers)\n');
	}
	for (const k of cases) {
		await loop(k.fn, 10000); /* warm: JIT, inline caches */
		k.n = await calibrate(k.fn);
		k.v = [];
	}
	for (let r = 0; r < RUNS; r++)
		for (const k of cases)
			k.v.push(await loop(k.fn, k.n));
	const rows = cases.map((k) => {
		const v = k.v.slice().sort((a, b) => a - b);
		const med = v[Math.floor(v.length / 2)];
		process.stderr.write(
		    `  peer           ${k.name.padEnd(34)} ${med.toFixed(2).padStart(9)} ns/op ` +
		    `[${v[0].toFixed(2)}-${v[v.length - 1].toFixed(2)}] ${k.note}\n`);
		return [
			'peer', k.name, 'ns_op', med.toFixed(2), v[0].toFixed(2),
			v[v.length - 1].toFixed(2), 'ns', `${k.note} n=${k.n}`
		].join('\t');
	});
	const text = rows.join('\n') + '\n';
	if (out)
		fs.appendFileSync(out, text);
	else
		process.stdout.write(text);
}

main().catch((e) => {
	process.stderr.write('node_peers: ' + (e && e.stack ? e.stack : e) + '\n');
	process.exit(1);
});
