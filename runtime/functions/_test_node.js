// TEST ONLY: the Node agent's handler shapes and failures, chosen by
// event.mode: an async handler (Lambda's shape) that returns the context's
// fields, throws, rejects with a non-Error, never settles (timeout), draws
// from Math.random and crypto (re-seeding), or leaves a promise rejected
// outside its own chain.
const crypto = require('crypto');

exports.handler = async (event, context) => {
  switch (event.mode) {
    case 'context':
      return {
        awsRequestId: context.awsRequestId,
        functionName: context.functionName,
        memoryLimitInMB: context.memoryLimitInMB,
        remaining: context.getRemainingTimeInMillis(),
        event,
      };
    case 'throw':
      throw new TypeError('boom: ' + event.what);
    case 'reject':
      return Promise.reject('a plain string');
    case 'hang':
      return new Promise(() => {});
    case 'rng':
      return { math: [Math.random(), Math.random()], crypto: crypto.randomBytes(16).toString('hex') };
    case 'unhandled':
      Promise.reject(new RangeError('nobody waits for me'));
      return new Promise(() => {});
    case 'bigint':
      return { n: 1n };
    default:
      return { mode: event.mode === undefined ? null : event.mode };
  }
};
