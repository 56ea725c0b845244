// Every cdk-nag rule of every pack mlcluster supports, evaluated on every resource of the given
// synthesized templates; prints one JSON array of [pack, ruleId, templatePath, logicalId, result]
// (the path as given on the command line).
//
// cdk-nag 3.x reports only violations, so tools/compliance_report.py runs this to learn, per rule,
// whether it judged a resource compliant, found nothing to judge (N/A) or found a finding (which the
// synthesis only lets through when it is acknowledged). The packs run in JavaScript on the templates
// loaded with cloudformation-include: calling back into Python for each rule and resource would
// take minutes. Usage: node compliance_rules.js TEMPLATE.json...
'use strict';
const fs = require('fs');
const path = require('path');
const cdk = require('aws-cdk-lib');
const inc = require('aws-cdk-lib/cloudformation-include');
const nag = require('cdk-nag');

const PACKS = [nag.AwsSolutionsChecks, nag.NIST80053R5Checks, nag.HIPAASecurityChecks, nag.PCIDSS321Checks];
// Intrinsics cloudformation-include parses; others (Fn::GetStackOutput, Fn::ToJsonString) become an
// opaque import, a value known only at deploy time, which is how the rules treat them after synthesis.
const PARSED = new Set(['Ref', 'Fn::GetAtt', 'Fn::Join', 'Fn::Cidr', 'Fn::FindInMap', 'Fn::Select', 'Fn::GetAZs',
  'Fn::ImportValue', 'Fn::Split', 'Fn::Transform', 'Fn::Base64', 'Fn::If', 'Fn::Equals', 'Fn::And', 'Fn::Not',
  'Fn::Or', 'Fn::Sub', 'Condition']);

function opaque(value) {
  if (Array.isArray(value)) return value.map(opaque);
  if (value === null || typeof value !== 'object') return value;
  const keys = Object.keys(value);
  if (keys.length === 1 && keys[0].startsWith('Fn::') && !PARSED.has(keys[0])) {
    return { 'Fn::ImportValue': `${keys[0]}:${JSON.stringify(value[keys[0]])}` };
  }
  return Object.fromEntries(keys.map((k) => [k, opaque(value[k])]));
}

const rows = [];
const tmp = fs.mkdtempSync(path.join(require('os').tmpdir(), 'mlcluster-compliance-'));
try {
  for (const file of process.argv.slice(2)) {
    const copy = path.join(tmp, path.basename(file));
    fs.writeFileSync(copy, JSON.stringify(opaque(JSON.parse(fs.readFileSync(file, 'utf8')))));
    const stack = new cdk.Stack(new cdk.App(), 'Stack');
    new inc.CfnInclude(stack, 'Template', { templateFile: copy });
    for (const Pack of PACKS) {
      class Recorder extends Pack {
        applyRule(params) {
          const ruleId = `${this.packName}-${params.ruleSuffixOverride ?? params.rule.name}`;
          let result;
          try {
            result = params.rule(params.node);
          } catch (error) {
            result = 'Error';
          }
          rows.push([this.packName, ruleId, file, stack.resolve(params.node.logicalId), result]);
        }
      }
      new Recorder().validateScope(stack);
    }
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(rows));
