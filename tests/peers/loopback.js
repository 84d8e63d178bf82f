// Force every net.Server.listen onto 127.0.0.1 (server-everything's HTTP modes bind all interfaces).
const net = require('net');
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    const port = args[0];
    const cb = args.find((a) => typeof a === 'function');
    return orig.call(this, { port: Number(port), host: '127.0.0.1' }, cb);
  }
  if (args[0] && typeof args[0] === 'object' && !args[0].path) {
    args[0] = Object.assign({}, args[0], { host: '127.0.0.1' });
  }
  return orig.apply(this, args);
};
