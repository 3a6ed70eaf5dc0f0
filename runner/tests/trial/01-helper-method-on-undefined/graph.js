export const meta = {name: 'helper-method-on-undefined', slug: 'helper-method-on-undefined', version: '1'};
function clean(text) {
  const y = text.missing;
  return y.trim();
}
export default async function (args, g) {
  return clean({});
}
